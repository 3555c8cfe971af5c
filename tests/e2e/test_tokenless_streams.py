"""Calls without credentials cannot hold every call the server takes.

A refused stream waits up to a second for its first frame before it is answered (so the
refusal reaches a client still writing it). Each waiting refusal held one of the server's
`--max-rpcs` slots: a client without a token that opened `--max-rpcs` tokenless `Consume`
(or RocketMQ `Telemetry`) streams, again and again, kept every caller with a token out with
RESOURCE_EXHAUSTED. The waits now share the slots of the streams that need no token (at most
half of `--max-rpcs`); beyond them a tokenless stream is refused at once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import service_pb2_grpc

from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import gateway_pb2, gateway_pb2_grpc

TOKENS = """
[[principal]]
name = "app"
token = "app-token"
publish = ["orders"]
consume = ["orders"]
groups = ["app"]
rocketmq_access_key = "app-ak"
rocketmq_secret_key = "app-sk"
"""
AUTH = [("authorization", "Bearer app-token")]
MAX_RPCS = 100


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens),
                               max_rpcs=MAX_RPCS) as running:
        yield running


async def _silent(stop: asyncio.Event) -> AsyncIterator[Any]:
    """A request stream that sends nothing until `stop` is set."""
    await stop.wait()
    return
    yield  # pragma: no cover


def _code(outcome: object) -> str:
    if isinstance(outcome, grpc.aio.AioRpcError):
        return outcome.code().name
    return type(outcome).__name__


@pytest.mark.parametrize("service", ["gateway", "rocketmq", "both"])
async def test_tokenless_streams_leave_room_for_callers_with_a_token(
    app: GatewayApp, service: str
) -> None:
    target = f"127.0.0.1:{app.grpc_port}"
    stop = asyncio.Event()
    async with grpc.aio.insecure_channel(target) as attacker, \
            grpc.aio.insecure_channel(target) as channel:
        gw = gateway_pb2_grpc.GatewayStub(attacker)
        rmq = service_pb2_grpc.MessagingServiceStub(attacker)
        calls: list[Any] = []
        for i in range(MAX_RPCS):
            use_rmq = service == "rocketmq" or (service == "both" and i % 2)
            calls.append(rmq.Telemetry(_silent(stop)) if use_rmq
                         else gw.Consume(_silent(stop)))
        reads = [asyncio.ensure_future(call.read()) for call in calls]
        await asyncio.sleep(0.3)  # every one of them reached the server
        try:
            publish = gateway_pb2.PublishRequest(
                topic="orders", messages=[gateway_pb2.Message(body=b"with a token")])
            reply = await gateway_pb2_grpc.GatewayStub(channel).Publish(
                publish, metadata=AUTH, timeout=10)
            assert len(reply.message_ids) == 1
        finally:
            outcomes = await asyncio.gather(*reads, return_exceptions=True)
            stop.set()
        # Every tokenless stream got its refusal, whether it waited or not.
        assert Counter(_code(o) for o in outcomes) == {"UNAUTHENTICATED": MAX_RPCS}
        assert not any(g.topic != "orders" for g in app.engine.groups())


@pytest.mark.parametrize("method", ["/gateway.v1.Gateway/Publish", "/gateway.v1.Gateway/Settle",
                                    "/gateway.v1.Admin/ListTopics"])
async def test_a_tokenless_unary_call_is_refused_before_its_request_arrives(
    app: GatewayApp, method: str
) -> None:
    """grpc reads a unary request whole before its handler runs: a client without a token that
    never finished its request held the call (one of --max-rpcs) for ever, and one that sent
    64 MiB had the server buffer and decode it, only to be refused. A client stream on the
    method's path is the same bytes on the wire as a unary call that is slow to send."""
    stop = asyncio.Event()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        call = channel.stream_unary(method)(_silent(stop))
        try:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await asyncio.wait_for(call, 10)
        finally:
            stop.set()
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # A whole request without a token: the same answer, however large.
        publish = gateway_pb2_grpc.GatewayStub(channel).Publish
        big = gateway_pb2.PublishRequest(topic="orders", messages=[
            gateway_pb2.Message(body=b"x" * (3 << 20))])
        for request in (big, gateway_pb2.PublishRequest(topic="orders")):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await publish(request, metadata=[("authorization", "Bearer wrong")])
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(("method", "streamed"), [
    ("SendMessage", False), ("QueryRoute", False), ("AckMessage", False),
    ("ReceiveMessage", True), ("PullMessage", True)])
async def test_an_unsigned_rocketmq_call_is_refused_before_its_request_arrives(
    app: GatewayApp, method: str, streamed: bool
) -> None:
    """The same over RocketMQ: a call with a unary request and no valid signature held the
    call until the request was whole (for ever when it never was)."""
    stop = asyncio.Event()
    path = f"/apache.rocketmq.v2.MessagingService/{method}"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        try:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                if streamed:
                    call = channel.stream_stream(path)(_silent(stop))
                    await asyncio.wait_for(call.read(), 10)
                else:
                    await asyncio.wait_for(channel.stream_unary(path)(_silent(stop)), 10)
        finally:
            stop.set()
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "authorization" in (err.value.details() or "")
