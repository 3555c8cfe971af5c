"""Pages of big messages fit a gRPC message: ListDeadLetters and ExportMessages hold at most
PAGE_BYTES of messages (at least one) and continue on the next page. A page of 100 dead
letters of 4 MiB was larger than the gRPC send limit: every listing failed RESOURCE_EXHAUSTED,
so neither `gateway dlq list` nor the console could show that group's dead letters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.client import GatewayClient
from gateway.server.admin_move import PAGE_BYTES
from gateway.server.app import running_gateway
from gateway.v1 import admin_pb2

SIZE = 3 * 1024 * 1024
COUNT = 12


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    async with running_gateway(tmp_path / "data") as app, \
            GatewayClient(f"127.0.0.1:{app.grpc_port}") as c:
        yield c


async def test_big_dead_letters_are_listed_and_exported_page_by_page(
    client: GatewayClient,
) -> None:
    for i in range(COUNT):
        await client.publish("big", [bytes([65 + i]) * SIZE])
    settled = 0
    while settled < COUNT:
        got = await client.receive("big", "g", policy="rocketmq-simple", max_messages=1,
                                   wait_ms=1000)
        for d in got:
            await d.dead_letter("big")
            settled += 1
    seen: list[bytes] = []
    token, pages = "", 0
    while True:
        page = await client.admin.ListDeadLetters(admin_pb2.ListDeadLettersRequest(
            topic="big", group="g", limit=100, page_token=token))
        assert 1 <= len(page.dead_letters) <= PAGE_BYTES // SIZE
        seen += [m.body[:1] for m in page.dead_letters]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert sorted(seen) == [bytes([65 + i]) for i in range(COUNT)] and pages > 1
    exported: list[bytes] = []
    token = ""
    while True:
        out = await client.admin.ExportMessages(admin_pb2.ExportMessagesRequest(
            topic="big", group="g", part=admin_pb2.MESSAGE_PART_DEAD_LETTER, limit=1000,
            page_token=token))
        assert 1 <= len(out.messages) <= PAGE_BYTES // SIZE
        exported += [m.body[:1] for m in out.messages]
        token = out.next_page_token
        if not token:
            break
    assert sorted(exported) == sorted(seen)
