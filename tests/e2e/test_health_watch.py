"""grpc.health.v1 Watch streams health changes (it is a coroutine handler that writes with
`context.write`; the gateway's interceptors must pass it through, with and without auth)."""

from __future__ import annotations

from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.server.app import running_gateway

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
