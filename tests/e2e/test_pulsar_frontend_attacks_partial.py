"""Frames that never complete (second attack round): a frame announced at the size limit and
sent all but its last byte held its bytes outside the read budget, so 60 such connections took
the gateway from 59 to 304 MiB. Incomplete frames are now counted across the listener against
`partial_frame_bytes` (a connection that would pass it is closed, nobody else is held back)
and must complete within twice the keepalive interval."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import tests.pulsar_raw as raw
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import FRAME_OVERHEAD
from tests.pulsar_raw import Cmd, RawClient

SIZE = 64 * 1024
LARGEST = SIZE + FRAME_OVERHEAD


def ping() -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.PING)
    cmd.ping.SetInParent()
    return cmd


async def loris(port: int, sent: int) -> RawClient:
    """Announces a frame of LARGEST bytes and sends `sent` of them; its PING goes first in the
    same write, so once the PONG is back the front end reads the frame."""
    client = await RawClient.open(port)
    frame = raw.command_frame(ping().SerializeToString())
    client.writer.write(frame + struct.pack(">I", LARGEST) + bytes(sent))
    await client.expect(Cmd.PONG)
    return client


async def test_incomplete_frames_past_the_cap_close_their_connection(tmp_path: Path) -> None:
    async with raw.front_end(tmp_path, max_message_size=SIZE, read_budget_bytes=0,
                             partial_frame_bytes=LARGEST, keepalive_s=30) as (front, _):
        first = await loris(front.port, LARGEST - 100)
        second = await loris(front.port, 4000)  # the two would pass the cap: closed
        assert await second.closed()
        # Nobody else is held back: complete frames are served.
        victim = await RawClient.open(front.port)
        victim.send(raw.producer(1, 1, "after"))
        await victim.expect(Cmd.PRODUCER_SUCCESS)
        victim.send(raw.send(1, 0), raw.meta("after", 0), b"x")
        await victim.expect(Cmd.SEND_RECEIPT)
        # What the closed connections held is given back.
        await first.close()
        shared = front._shared
        assert shared is not None
        for _ in range(200):
            if shared.partial.used == 0:
                break
            await asyncio.sleep(0.01)
        assert shared.partial.used == 0
        await victim.close()

async def test_a_frame_must_complete_within_twice_the_keepalive(tmp_path: Path) -> None:
    async with raw.front_end(tmp_path, max_message_size=SIZE, keepalive_s=0.2) as (front, _):
        attacker = await loris(front.port, SIZE // 2)
        assert await attacker.closed(2.0)
