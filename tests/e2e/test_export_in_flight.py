"""ExportMessages while a pull consumer holds a delivery of the group: before, the message was
exported all the same (and RemoveExported then removed it under the consumer), so it was
processed twice. Now FAILED_PRECONDITION names the deliveries in flight; once settled, export
goes on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.client import GatewayClient
from gateway.server.app import running_gateway
from gateway.v1 import admin_pb2 as pb


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    async with (
        running_gateway(tmp_path / "data") as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as c,
    ):
        yield c


async def test_export_is_refused_while_a_pull_delivery_is_in_flight(
    client: GatewayClient,
) -> None:
    await client.publish("orders", [b"held", b"free"])
    (held,) = await client.receive("orders", "g", policy="rocketmq", max_messages=1)
    request = pb.ExportMessagesRequest(topic="orders", group="g", part=pb.MESSAGE_PART_READY,
                                       limit=100)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.admin.ExportMessages(request)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "1 delivery in flight" in (refused.value.details() or "")
    assert (await held.ack()).ok
    page = await client.admin.ExportMessages(request)
    assert [m.body for m in page.messages] == [b"free"]
