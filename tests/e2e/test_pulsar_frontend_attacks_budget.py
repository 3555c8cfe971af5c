"""The listener's read budget against clients that announce large frames and never send them
(slow loris): an announced frame costs no budget until it has arrived whole, so such clients
hold back nobody else, and the keepalive closes them."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.frontend.budget import FRAME_COST
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import FRAME_OVERHEAD
from tests.pulsar_raw import Cmd, RawClient

Front = Callable[..., AbstractAsyncContextManager[PulsarFrontEnd]]
SIZE = 64 * 1024
"""The message limit in these tests; the budget is the least allowed, two largest frames."""
LARGEST = SIZE + FRAME_OVERHEAD


@pytest.fixture
def front(tmp_path: Path) -> Front:
    @asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[PulsarFrontEnd]:
        async with raw.front_end(tmp_path, max_message_size=SIZE, read_budget_bytes=0,
                                 **options) as (instance, _):
            yield instance

    return make


def ping() -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.PING)
    cmd.ping.SetInParent()
    return cmd


async def loris(port: int, size: int = LARGEST, sent: int = 0) -> RawClient:
    """A connection that announces a frame of `size` bytes and sends `sent` bytes of it. Its
    PING goes in the same write: once its PONG is back, the front end has read the size that
    follows it."""
    client = await RawClient.open(port)
    frame = raw.command_frame(ping().SerializeToString())
    client.writer.write(frame + struct.pack(">I", size) + bytes(sent))
    await client.expect(Cmd.PONG)
    return client


async def test_announced_frames_hold_back_no_other_client(front: Front) -> None:
    async with front(keepalive_s=30) as instance:
        # Two announced frames that, were they charged, would leave less budget than any
        # frame needs (FRAME_COST each).
        attackers = [await loris(instance.port, sent=1000),
                     await loris(instance.port, LARGEST - 2 * FRAME_COST - 200, sent=1000)]
        victim = await RawClient.open(instance.port)
        victim.send(ping())
        await victim.expect(Cmd.PONG)
        victim.send(raw.producer(1, 1, "after"))
        await victim.expect(Cmd.PRODUCER_SUCCESS)
        victim.send(raw.send(1, 0), raw.meta("after", 0), bytes(SIZE - 1024))
        await victim.expect(Cmd.SEND_RECEIPT)
        for attacker in attackers:
            await attacker.close()
        await victim.close()


async def test_a_frame_never_finished_is_closed_by_the_keepalive(front: Front) -> None:
    async with front(keepalive_s=0.2) as instance:
        attacker = await loris(instance.port, sent=SIZE // 2)
        assert await attacker.closed()
