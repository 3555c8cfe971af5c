"""An admin peek on the Pulsar back end finds a message whose publish returned before it: the peek
catches the subscription's consumer up to the topic's last message id first (`catch_up`)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.pulsar.backend import PulsarBackend
from gateway.backend.base import OutMessage
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway

GROUP = "g1"
ROUNDS = 200


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[PulsarBackend]:
    url = os.environ.get("PULSAR_SERVICE_URL", "")
    if url:
        instance = PulsarBackend(url)
        await instance.open()
        yield instance
        await instance.close()
        return
    async with running_gateway(tmp_path / "broker", pulsar_listen="127.0.0.1:0") as upstream:
        instance = PulsarBackend(f"pulsar://127.0.0.1:{upstream.front_ends['pulsar'].port}")
        await instance.open()
        yield instance
        await instance.close()


async def test_peek_lists_a_message_published_just_before(backend: PulsarBackend) -> None:
    topic = f"peek-{uuid.uuid4().hex[:10]}"
    assert await backend.fetch(topic, GROUP, 10, SystemClock().now_ms()) == []
    for n in range(ROUNDS):
        await backend.publish(topic, [OutMessage(body=f"m{n}".encode())])
        listing = await backend.peek(topic, GROUP, ROUNDS + 1)
        assert [m.body for m in listing] == [f"m{i}".encode() for i in range(n + 1)], n
