"""A gateway's name in its telemetry rows (and trace resources): the host name unless set
(`--gateway-id`, `[server] gateway_id`), so that two gateways writing into one table are told
apart. Before, every gateway wrote `gateway`, and their (gateway_id, seq) pairs repeated."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from gateway.client import GatewayClient
from gateway.server.app import running_gateway
from gateway.telemetry.spool import SEGMENT_RE


def spooled_ids(data: Path) -> set[str]:
    ids: set[str] = set()
    for path in (data / "telemetry").iterdir():
        if SEGMENT_RE.match(path.name):
            ids |= {json.loads(line)["gateway_id"] for line in path.read_text().splitlines()}
    return ids


@pytest.mark.parametrize("given", [None, "gw-a"])
async def test_rows_carry_the_host_name_or_the_given_id(tmp_path: Path, given: str | None) -> None:
    settings = {} if given is None else {"gateway_id": given}
    async with running_gateway(tmp_path / "data", telemetry=True, **settings) as app, \
            GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
        await client.publish("orders", [b"one"])
        (message,) = await client.receive("orders", "billing", policy="rocketmq-simple",
                                          invisible_ms=60_000, wait_ms=5_000)
        assert (await message.ack()).ok
    assert spooled_ids(tmp_path / "data") == {given or socket.gethostname()}
