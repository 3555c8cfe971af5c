"""An HTTP/2 connection that carries no call is closed after IDLE_CONNECTION_MS (idle sockets
held open by the thousand would use up file descriptors); a client's next call reconnects."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest

from gateway.server import app as app_module
from gateway.server.app import running_gateway
from gateway.v1 import gateway_pb2, gateway_pb2_grpc


async def test_an_idle_connection_is_closed_and_the_client_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app_module, "IDLE_CONNECTION_MS", 500)
    async with running_gateway(tmp_path / "data") as app, \
            grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        request = gateway_pb2.PublishRequest(topic="t", messages=[gateway_pb2.Message(body=b"x")])
        await stub.Publish(request)
        assert channel.get_state() is grpc.ChannelConnectivity.READY
        deadline = time.monotonic() + 10
        while channel.get_state() is grpc.ChannelConnectivity.READY:
            assert time.monotonic() < deadline, "the idle connection was never closed"
            await asyncio.sleep(0.1)
        await stub.Publish(request)  # reconnects by itself
