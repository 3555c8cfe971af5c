"""`gateway serve --listen [::1]:PORT`: an IPv6 loopback address passes the settings' check, so
the gRPC API must listen on it (grpc was handed `::1:PORT`, which it read as the host `::1:PORT`
on port 443, and the gateway exited saying the address was in use)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gateway.client import GatewayClient
from tests.e2e.test_store_hung import gateway


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this host")
async def test_the_grpc_api_listens_on_an_ipv6_loopback_address(tmp_path: Path) -> None:
    with gateway(tmp_path / "data", tmp_path / "gateway.log", "--listen", "[::1]:0") as (
        proc, target,
    ):
        assert target.startswith("[::1]:")
        async with GatewayClient(target) as client:
            ids = await client.publish("v6", [b"over ipv6"])
            got = await client.receive("v6", "g", policy="rocketmq", wait_ms=5000)
            assert [m.message_id for m in got] == ids
            assert (await got[0].ack()).ok
    assert proc.returncode == 0
