"""With a tokens file, bad input gets the answers it gets without one: a malformed name is
INVALID_ARGUMENT naming the field (never PERMISSION_DENIED), a PublishStream answers it and goes
on, and undecodable bytes on a stream without a token are refused once, with nothing logged."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import gateway_pb2, gateway_pb2_grpc

TOKENS = """
[[principal]]
name = "app"
token = "app-secret"
publish = ["a.*"]
consume = ["a.*"]
groups = ["g*"]
"""
AUTH = [("authorization", "Bearer app-secret")]
BAD_NAMES = ["", " ", "\x01", "x\n"]


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens)) as running:
        yield running


@pytest.fixture
async def stub(app: GatewayApp) -> AsyncIterator[gateway_pb2_grpc.GatewayStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        yield gateway_pb2_grpc.GatewayStub(channel)


def _publish(topic: str) -> gateway_pb2.PublishRequest:
    return gateway_pb2.PublishRequest(topic=topic, messages=[gateway_pb2.Message(body=b"x")])


@pytest.mark.parametrize("topic", BAD_NAMES)
async def test_a_malformed_topic_is_invalid_not_forbidden(
    stub: gateway_pb2_grpc.GatewayStub, topic: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Publish(_publish(topic), metadata=AUTH)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith("topic=")
    receive = gateway_pb2.ReceiveRequest(topic=topic, group="g1", policy="rocketmq-simple",
                                         max_messages=1)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Receive(receive, metadata=AUTH)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith("topic=")


@pytest.mark.parametrize("group", ["", "\x01"])
async def test_a_malformed_group_is_invalid_not_forbidden(
    stub: gateway_pb2_grpc.GatewayStub, group: str
) -> None:
    receive = gateway_pb2.ReceiveRequest(topic="a.t", group=group, policy="rocketmq-simple",
                                         max_messages=1)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Receive(receive, metadata=AUTH)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith("group=")
    subscribe = gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
        topic="a.t", group=group, policy="rocketmq"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Consume(iter([subscribe]), metadata=AUTH):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith("group=")


async def test_a_publish_stream_answers_a_malformed_topic_and_goes_on(
    stub: gateway_pb2_grpc.GatewayStub,
) -> None:
    requests = [gateway_pb2.PublishStreamRequest(request_id=i, publish=_publish(topic))
                for i, topic in enumerate(["a.t", *BAD_NAMES, "a.t"])]
    answers = [a async for a in stub.PublishStream(iter(requests), metadata=AUTH)]
    assert [a.request_id for a in answers] == list(range(len(requests)))
    assert [a.error_code for a in answers] == ["", *["INVALID_ARGUMENT"] * 4, ""]
    assert all(a.error.startswith("topic=") for a in answers[1:-1])
    assert len(answers[0].message_ids) == len(answers[-1].message_ids) == 1
    # A well-formed topic the token may not publish to still ends the stream.
    denied = [gateway_pb2.PublishStreamRequest(request_id=1, publish=_publish("b.t"))]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.PublishStream(iter(denied), metadata=AUTH):
            pass
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize("method", ["PublishStream", "Consume"])
async def test_undecodable_bytes_on_a_stream_without_a_token_are_refused_once(
    app: GatewayApp, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Bytes that do not decode are refused for that (before its token is looked at); the
    call is ended once and nothing is logged as an error (grpc logged "Abort already called!"
    with a traceback when the call was aborted twice). A unary request without a token is not
    read at all (tests/e2e/test_tokenless_streams.py): UNAUTHENTICATED, whatever its bytes."""
    caplog.set_level(logging.ERROR)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        call = channel.stream_stream(f"/gateway.v1.Gateway/{method}")
        with capture_logs() as logs:
            for _ in range(3):
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    async for _ in call(iter([b"\xff"])):
                        pass
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "request" in (err.value.details() or "")
            # A call without a token whose frame decodes is still unauthenticated.
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in call(iter([b""])):
                    pass
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert [e for e in logs if e["log_level"] in ("error", "critical")] == []
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        unary = channel.unary_unary("/gateway.v1.Gateway/Publish")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await unary(b"\xff")
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
