"""A delivery's content header fits the consumer's negotiated frame_max, whatever properties a
publisher of another protocol gave the message: the largest headers are left out, the basic
properties and the smaller headers stay, and `x-headers-dropped` says how many went.
Read as raw frames (their sizes as sent) and with aio-pika."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest
from pamqp import commands, frame

from adapters.amqp.frontend.consumers import HEADERS_DROPPED
from gateway.backend.base import OutMessage
from tests.amqp_front import AmqpGateway, RawAmqp, amqp_gateway, unique


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data") as gateway:
        yield gateway


async def raw_frames(raw: RawAmqp, count: int) -> list[tuple[int, bytes]]:
    """The next `count` frames, whole (header and end octet included), undecoded."""
    out = []
    while len(out) < count:
        if len(raw.buffer) >= 7:
            size = struct.unpack_from(">I", raw.buffer, 3)[0]
            if len(raw.buffer) >= size + 8:
                out.append((raw.buffer[0], raw.buffer[:size + 8]))
                raw.buffer = raw.buffer[size + 8:]
                continue
        data = await asyncio.wait_for(raw.reader.read(65536), 5)
        assert data, "the server closed the connection"
        raw.buffer += data
    return out


async def publish(gw: AmqpGateway, queue: str, properties: dict[str, str]) -> None:
    assert gw.app is not None
    await gw.app.engine.publish(queue, [OutMessage(b"body", properties)])


async def get_properties(raw: RawAmqp, queue: str, frame_max: int) -> commands.Basic.Properties:
    raw.send(1, commands.Basic.Get(queue=queue, no_ack=True))
    frames = await raw_frames(raw, 3)
    assert [kind for kind, _ in frames] == [1, 2, 3]
    assert all(len(data) <= frame_max for _, data in frames), [len(d) for _, d in frames]
    _, _, content = frame.unmarshal(frames[1][1])
    properties: commands.Basic.Properties = content.properties
    return properties


async def declared(gw: AmqpGateway, frame_max: int) -> tuple[RawAmqp, str]:
    raw = await RawAmqp.connect(gw.port, frame_max=frame_max)
    queue = unique("fm")
    raw.send(1, commands.Queue.Declare(queue=queue, durable=True))
    await raw.expect(commands.Queue.DeclareOk)
    return raw, queue


async def test_a_60_kb_header_to_a_consumer_of_frame_max_4096(gw: AmqpGateway) -> None:
    raw, queue = await declared(gw, 4096)
    try:
        await publish(gw, queue, {"small": "kept", "big": "b" * 60_000, "mid": "m" * 3000,
                                  "amqp.message-id": "id-1", "amqp.content-type": "text/x"})
        props = await get_properties(raw, queue, 4096)
        assert props.message_id == "id-1" and props.content_type == "text/x"
        headers = props.headers
        assert headers["small"] == "kept" and headers["mid"] == "m" * 3000  # fits without big
        assert "big" not in headers
        assert headers[HEADERS_DROPPED] == 1
    finally:
        raw.close()


async def test_only_the_headers_that_do_not_fit_are_left_out(gw: AmqpGateway) -> None:
    raw, queue = await declared(gw, 131072)
    try:
        many = {f"h{i:03}": "v" * 1000 for i in range(300)}  # 300 KB of legal properties
        await publish(gw, queue, {**many, "amqp.message-id": "id-2"})
        props = await get_properties(raw, queue, 131072)
        headers = props.headers
        kept = [k for k in headers if k.startswith("h")]
        assert 100 < len(kept) < 300
        assert headers[HEADERS_DROPPED] == 300 - len(kept)
        assert props.message_id == "id-2"
    finally:
        raw.close()


async def test_a_header_that_fits_is_untouched(gw: AmqpGateway) -> None:
    raw, queue = await declared(gw, 4096)
    try:
        await publish(gw, queue, {"a": "x" * 3000})
        props = await get_properties(raw, queue, 4096)
        assert props.headers == {"a": "x" * 3000}
    finally:
        raw.close()


async def test_aio_pika_gets_the_message_with_the_headers_that_fit(gw: AmqpGateway) -> None:
    queue = unique("fm")
    connection = await aio_pika.connect_robust(gw.url)
    try:
        ch = await connection.channel()
        q = await ch.declare_queue(queue, durable=True)
        await publish(gw, queue, {"keep": "yes", "huge": "z" * 300_000})
        message = None
        for _ in range(100):
            message = await q.get(fail=False, no_ack=True)
            if message is not None:
                break
            await asyncio.sleep(0.05)
        assert message is not None and message.body == b"body"
        assert message.headers["keep"] == "yes" and "huge" not in message.headers
        assert message.headers[HEADERS_DROPPED] == 1
    finally:
        await connection.close()
