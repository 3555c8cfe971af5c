"""RemoveExported removes only what belongs to the topic it names. A group's retry and
dead-letter destinations may be shared by its topics (RocketMQ's `%RETRY%G` and `%DLQ%G` are one
per group): ExportMessages gives only the named topic's messages, but RemoveExported removed
whatever the positions named, so a caller could remove another topic's retries and dead letters
by naming its own topic. Each position is now checked: one holding another topic's message is
refused, INVALID_ARGUMENT naming `positions[i]`, and nothing is removed; an unknown position is
skipped, as before."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from gateway.server.app import running_gateway
from gateway.v1 import admin_pb2 as pb
from gateway.v1 import admin_pb2_grpc

LATER = int(time.time() * 1000) + 3_600_000


def _copies(topic: str, part: int, n: int) -> list[pb.MovedMessage]:
    return [pb.MovedMessage(source_key=f"{topic}-{part}-{i}", part=part,
                            body=f"{topic} {i}".encode(),
                            deliver_at_ms=LATER if part == pb.MESSAGE_PART_RETRY else 0)
            for i in range(n)]


async def _positions(stub: admin_pb2_grpc.AdminStub, topic: str, part: int) -> list[int]:
    page = await stub.ExportMessages(pb.ExportMessagesRequest(
        topic=topic, group="g", part=part, naming="rocketmq", limit=1000), timeout=30)
    return [m.position for m in page.messages]


@pytest.mark.parametrize("part", [pb.MESSAGE_PART_RETRY, pb.MESSAGE_PART_DEAD_LETTER])
async def test_positions_of_another_topic_are_refused(tmp_path: Path, part: int) -> None:
    async with (
        running_gateway(tmp_path / "data") as app,
        grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel,
    ):
        stub = admin_pb2_grpc.AdminStub(channel)
        for topic in ("orders", "refunds"):
            await stub.ImportMessages(pb.ImportMessagesRequest(
                topic=topic, group="g", ledger=topic, naming="rocketmq",
                messages=_copies(topic, part, 3)), timeout=30)
        orders = await _positions(stub, "orders", part)
        refunds = await _positions(stub, "refunds", part)
        assert len(orders) == len(refunds) == 3
        assert not set(orders) & set(refunds)  # one shared destination

        # Its own positions and one of refunds', named as orders': nothing removed.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.RemoveExported(pb.RemoveExportedRequest(
                topic="orders", group="g", part=part, naming="rocketmq",
                positions=[*orders, refunds[1]]), timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = caught.value.details() or ""
        assert f"positions[3]={refunds[1]}" in details, details
        assert "'refunds'" in details, details
        assert await _positions(stub, "refunds", part) == refunds
        assert await _positions(stub, "orders", part) == orders

        # Its own positions, and one no message holds (skipped): removed.
        answer = await stub.RemoveExported(pb.RemoveExportedRequest(
            topic="orders", group="g", part=part, naming="rocketmq",
            positions=[*orders, 10**9]), timeout=30)
        assert answer.removed == 3
        assert await _positions(stub, "orders", part) == []
        assert await _positions(stub, "refunds", part) == refunds

