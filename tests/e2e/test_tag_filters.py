"""Tag filters over the gateway API: RocketMQ's `a || b` lists tags, and its empty pieces name
none (they matched every untagged message, so a consumer of TagA got messages it had not
subscribed to)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.client import GatewayClient
from gateway.server.app import running_gateway
from gateway.v1 import gateway_pb2


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    async with (
        running_gateway(tmp_path / "data") as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as c,
    ):
        yield c


async def _received(client: GatewayClient, expression: str) -> list[bytes]:
    topic = f"tags-{uuid.uuid4().hex[:8]}"
    await client.publish(topic, [b"untagged"])
    await client.publish(topic, [b"a"], tag="TagA")
    await client.publish(topic, [b"b"], tag="TagB")
    got = await client.stub.Receive(gateway_pb2.ReceiveRequest(
        topic=topic, group="g", policy="rocketmq-simple", tag_filter=expression,
        max_messages=10, invisible_ms=60_000, wait_ms=200))
    return [d.body for d in got.deliveries]


@pytest.mark.parametrize("expression", ["TagA||", "TagA || ", "|| TagA", "TagA|| ||"])
async def test_empty_pieces_of_a_tag_filter_match_no_message(
    client: GatewayClient, expression: str
) -> None:
    assert await _received(client, expression) == [b"a"]


@pytest.mark.parametrize(("expression", "bodies"), [
    ("", [b"untagged", b"a", b"b"]), ("*", [b"untagged", b"a", b"b"]),
    ("TagA || TagB", [b"a", b"b"]), ("||", [])])
async def test_what_a_tag_filter_lets_through(
    client: GatewayClient, expression: str, bodies: list[bytes]
) -> None:
    assert await _received(client, expression) == bodies
