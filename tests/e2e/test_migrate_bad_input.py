"""The Admin calls behind `gateway migrate` refuse bad values with INVALID_ARGUMENT naming the
field (or the status the README gives), change nothing, and leave the gateway serving."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.client import GatewayClient
from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import admin_pb2 as pb
from gateway.v1 import admin_pb2_grpc

DAY_MS = 86_400_000


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(tmp_path / "data", max_message_bytes=65536) as running:
        yield running


def copy(**fields: Any) -> pb.MovedMessage:
    base: dict[str, Any] = {"body": b"x", "part": pb.MESSAGE_PART_READY, "source_key": "k"}
    base.update(fields)
    return pb.MovedMessage(**base)


BAD: list[tuple[str, Any, str]] = [
    ("RenameDestinations", pb.RenameDestinationsRequest(topic="t", group="g", from_naming="",
                                                        to_naming="pulsar-2.9"), "from_naming"),
    ("RenameDestinations", pb.RenameDestinationsRequest(topic="t", group="g",
                                                        from_naming="pulsar-2.7",
                                                        to_naming="nope"), "naming"),
    ("RenameDestinations", pb.RenameDestinationsRequest(topic="", group="g",
                                                        from_naming="pulsar-2.7",
                                                        to_naming="pulsar-2.9"), "topic"),
    ("ExportMessages", pb.ExportMessagesRequest(topic="t", group="g"), "part"),
    ("ExportMessages", pb.ExportMessagesRequest(topic="t", group="g", part=7), "part"),
    ("ExportMessages", pb.ExportMessagesRequest(topic="t", group="g", limit=1001,
                                                part=pb.MESSAGE_PART_READY), "limit"),
    ("ExportMessages", pb.ExportMessagesRequest(topic="t", group="g", page_token="-1",
                                                part=pb.MESSAGE_PART_READY), "page_token"),
    ("RemoveExported", pb.RemoveExportedRequest(topic="t", group="g",
                                                part=pb.MESSAGE_PART_READY), "positions"),
    # An unknown scheme is refused whatever the part (it was ignored for ready messages).
    ("ExportMessages", pb.ExportMessagesRequest(topic="t", group="g", naming="nope",
                                                part=pb.MESSAGE_PART_READY), "naming"),
    ("RemoveExported", pb.RemoveExportedRequest(topic="t", group="g", positions=[1],
                                                naming="nope", part=pb.MESSAGE_PART_READY),
     "naming"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", naming="nope", ledger="l",
                                                messages=[copy()]), "naming"),
    ("RemoveExported", pb.RemoveExportedRequest(topic="t", group="g", positions=[-1],
                                                part=pb.MESSAGE_PART_READY), "positions[0]"),
    ("RemoveExported", pb.RemoveExportedRequest(topic="t", group="g", positions=[2**62],
                                                part=pb.MESSAGE_PART_READY), "positions[0]"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l"), "messages"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="", messages=[copy()]),
     "ledger"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l" * 1025,
                                                messages=[copy()]), "ledger"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l",
                                                messages=[copy(source_key="")]),
     "messages[0].source_key"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l",
                                                messages=[copy(part=0)]), "messages[0].part"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l",
                                                messages=[copy(deliver_at_ms=-5)]),
     "messages[0].deliver_at_ms"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[
        copy(deliver_at_ms=2**62)]), "messages[0].deliver_at_ms"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[
        copy(part=pb.MESSAGE_PART_RETRY)]), "group"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", group="g", naming="nope",
                                                ledger="l", messages=[copy()]), "naming"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[
        copy(message_id="m" * 300)]), "messages[0].message_id"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[
        copy(properties={f"p{i}": "v" for i in range(1025)})]), "messages[0].properties"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[
        copy(attempt=2**32 - 1)]), "messages[0].attempt"),
    # Publish refuses a tag no tag_filter can name; ImportMessages stored it.
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[
        copy(), copy(tag="a\x00b")]), "messages[1].tag"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[
        copy(properties={f"p{i}": "" for i in range(1024)})] * 98), "100000"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", group="g", ledger="l", messages=[
        copy(part=pb.MESSAGE_PART_RETRY, retries=1_000_001)]), "messages[0].retries"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[copy()],
                                                source_retry_topic="\x00"),
     "source_retry_topic"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[copy()],
                                                source_dead_letter_topic=" "),
     "source_dead_letter_topic"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[copy()],
                                                source_dead_letter_topic="d\nx"),
     "source_dead_letter_topic"),
    ("ImportMessages", pb.ImportMessagesRequest(topic="t", ledger="l", messages=[copy()],
                                                source_dead_letter_topic="d" * 511),
     "source_dead_letter_topic"),
]


@pytest.mark.parametrize("method, request_, field", BAD,
                         ids=[f"{m}-{f}-{i}" for i, (m, _, f) in enumerate(BAD)])
async def test_bad_values_are_refused_by_name(app: GatewayApp, method: str, request_: Any,
                                              field: str) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await getattr(stub, method)(request_, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (caught.value.details() or "")
        topics = await stub.ListTopics(pb.ListTopicsRequest(), timeout=10)
    assert "t" not in topics.topics  # nothing was stored


async def test_too_large_copies_and_open_consumers(app: GatewayApp) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ImportMessages(pb.ImportMessagesRequest(
                topic="t", ledger="l", messages=[copy(body=b"x" * 70_000)]), timeout=10)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client, \
                client.consume("busy", "g", policy="rocketmq") as stream:
            await client.publish("busy", [b"a"])
            assert await stream.next(10) is not None
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ExportMessages(pb.ExportMessagesRequest(
                    topic="busy", group="g", part=pb.MESSAGE_PART_READY), timeout=10)
            assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "consumer(s) open" in (caught.value.details() or "")


async def test_a_copy_at_the_largest_attempt_is_delivered(app: GatewayApp) -> None:
    """The largest counts an import takes still fit a delivery (`Delivery.attempt` is uint32):
    the copy and a message published after it are received, nothing fails INTERNAL."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        await stub.ImportMessages(pb.ImportMessagesRequest(
            topic="high", group="g", ledger="l", messages=[
                copy(body=b"old", attempt=1_000_000, retries=1_000_000)]), timeout=10)
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
        await client.publish("high", [b"new"])
        got: list[Any] = []
        for _ in range(20):
            got += await client.receive("high", "g", policy="rocketmq-simple",
                                        max_messages=10, wait_ms=1000)
            if len(got) >= 2:
                break
        assert sorted(d.body for d in got) == [b"new", b"old"]
        assert max(d.attempt for d in got) == 1_000_001
