"""Selectors over the gateway API (`Subscribe.selector`, `ReceiveRequest.selector`): a group
gets only the messages whose properties the SQL92 condition selects; the others are not for it
(another group still gets them); one that does not parse is INVALID_ARGUMENT naming `selector`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.client import GatewayClient
from gateway.client_errors import InvalidArgumentError
from gateway.server.app import running_gateway


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    async with (
        running_gateway(tmp_path / "data") as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as c,
    ):
        yield c


async def _topic(client: GatewayClient) -> str:
    topic = f"sel-{uuid.uuid4().hex[:8]}"
    for body, props in ((b"cheap", {"price": "5", "region": "eu"}),
                        (b"dear", {"price": "50", "region": "eu"}),
                        (b"far", {"price": "70", "region": "us"}),
                        (b"none", {})):
        await client.publish(topic, [body], properties=props)
    return topic


async def test_a_receive_gets_what_its_selector_selects(client: GatewayClient) -> None:
    topic = await _topic(client)
    got = await client.receive(topic, "g", policy="rocketmq-simple", max_messages=10,
                               invisible_ms=60_000, wait_ms=200,
                               selector="price > 10 AND region IN ('eu')")
    assert [m.delivery.body for m in got] == [b"dear"]
    for m in got:
        assert (await m.ack()).ok
    again = await client.receive(topic, "g", policy="rocketmq-simple", max_messages=10,
                                 invisible_ms=60_000, wait_ms=0,
                                 selector="price > 10 AND region IN ('eu')")
    assert again == []  # the others were left out for this group, not held
    other = await client.receive(topic, "other", policy="rocketmq-simple", max_messages=10,
                                 invisible_ms=60_000, wait_ms=200)
    assert [m.delivery.body for m in other] == [b"cheap", b"dear", b"far", b"none"]


async def test_a_push_consumer_gets_what_its_selector_selects(client: GatewayClient) -> None:
    topic = await _topic(client)
    async with client.consume(topic, "g", policy="rocketmq", prefetch=10,
                              selector="price IS NULL OR NOT price < 60") as stream:
        first, second = await stream.next(10), await stream.next(10)
        assert first is not None and second is not None
        assert [first.delivery.body, second.delivery.body] == [b"far", b"none"]
        assert await stream.next(0.3) is None


@pytest.mark.parametrize("selector", ["price >", "price > 5 region", "(" * 80 + "a=1",
                                      "a = 'x", "a" * 5000])
async def test_a_selector_that_does_not_parse_is_invalid_argument(
    client: GatewayClient, selector: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await client.receive("t", "g", policy="rocketmq-simple", selector=selector)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "selector" in (raised.value.details() or "")
    with pytest.raises(InvalidArgumentError, match="selector"):
        async with client.consume("t", "g2", policy="rocketmq", selector=selector):
            pass
