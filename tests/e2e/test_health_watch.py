"""grpc.health.v1 Watch streams health changes (it is a coroutine handler that writes with
`context.write`; the gateway's interceptors must pass it through, with and without auth)."""

from __future__ import annotations

from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.server.app import running_gateway
from gateway.v1 import gateway_pb2, gateway_pb2_grpc

TOKENS = """
[[principal]]
name = "app"
token = "app-token"
publish = ["*"]
"""


async def _first_watch_answer(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
        async for answer in call:
            call.cancel()
            return int(answer.status)
    raise AssertionError("Watch ended without an answer")


async def test_watch_answers_serving(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as app:
        assert await _first_watch_answer(app.grpc_port) == health_pb2.HealthCheckResponse.SERVING


async def test_watch_answers_serving_under_auth(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens)) as app:
        assert await _first_watch_answer(app.grpc_port) == health_pb2.HealthCheckResponse.SERVING


async def test_streams_without_a_token_cannot_use_up_the_calls(tmp_path: Path) -> None:
    """Under auth, Watch (and reflection) need no token; at most half of `--max-rpcs` of them
    are open at once, so a caller with a token still gets through (before, 50 Watch streams
    on a gateway of 50 calls refused every Publish RESOURCE_EXHAUSTED)."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens), max_rpcs=20) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with grpc.aio.insecure_channel(target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            calls = [stub.Watch(health_pb2.HealthCheckRequest(service="")) for _ in range(20)]
            codes = []
            for call in calls:
                try:
                    await call.read()
                    codes.append(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as err:
                    codes.append(err.code())
            assert codes.count(grpc.StatusCode.OK) == 10
            assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 10
            publisher = gateway_pb2_grpc.GatewayStub(channel)
            reply = await publisher.Publish(gateway_pb2.PublishRequest(
                topic="t", messages=[gateway_pb2.Message(body=b"x")]),
                metadata=[("authorization", "Bearer app-token")], timeout=10)
            assert len(reply.message_ids) == 1
            for call in calls:
                call.cancel()
