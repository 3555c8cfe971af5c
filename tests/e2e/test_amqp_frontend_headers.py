"""Message headers through the AMQP front end arrive as they were sent, whatever their values:
a double the float type cannot hold (once a message that no consumer could ever receive, and
that closed the channel of everyone who tried), doubles a float would round, long strings that
are not UTF-8, field names over 128 bytes. Published with exactly the bytes a client may send;
read back as bytes with `basic.get`, and with aio-pika."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest
from pamqp import commands

from adapters.amqp.frontend.framing import reply
from tests.amqp_front import AmqpGateway, RawAmqp, amqp_gateway, raw_frame, unique

HEADERS_FLAG = 0x2000


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data") as gateway:
        yield gateway


def entry(name: bytes, kind: bytes, raw: bytes) -> bytes:
    return bytes([len(name)]) + name + kind + raw


def table(*entries: bytes) -> bytes:
    """A field table of `entries` (given in name order, as the gateway writes them back)."""
    payload = b"".join(entries)
    return struct.pack(">I", len(payload)) + payload


def publish_with_headers(raw: RawAmqp, queue: str, body: bytes, headers: bytes) -> None:
    """basic.publish with a content header whose only property is `headers`, as given."""
    raw.send(1, reply(commands.Basic.Publish, exchange="", routing_key=queue))
    payload = struct.pack(">HHQH", 60, 0, len(body), HEADERS_FLAG) + headers
    raw.send_raw(raw_frame(2, 1, payload) + raw_frame(3, 1, body))


async def raw_frames(raw: RawAmqp, count: int) -> list[tuple[int, bytes]]:
    """The next `count` frames as (type, payload), undecoded."""
    out = []
    while len(out) < count:
        if len(raw.buffer) >= 7:
            kind, _, size = struct.unpack_from(">BHI", raw.buffer)
            if len(raw.buffer) >= size + 8:
                out.append((kind, raw.buffer[7:7 + size]))
                raw.buffer = raw.buffer[size + 8:]
                continue
        data = await asyncio.wait_for(raw.reader.read(65536), 5)
        assert data, "the server closed the connection"
        raw.buffer += data
    return out


async def get_headers(raw: RawAmqp, queue: str) -> bytes:
    """`basic.get` one message (no ack); its content header's headers table, as sent."""
    raw.send(1, commands.Basic.Get(queue=queue, no_ack=True))
    (method_kind, method), (header_kind, header) = await raw_frames(raw, 2)
    assert (method_kind, struct.unpack_from(">HH", method)) == (1, (60, 71)), "not a get-ok"
    assert header_kind == 2
    flags = struct.unpack_from(">H", header, 12)[0]
    assert flags == HEADERS_FLAG
    await raw_frames(raw, 1)  # the body
    return header[14:]


async def confirmed(raw: RawAmqp, queue: str) -> None:
    raw.send(1, commands.Queue.Declare(queue=queue))
    await raw.expect(commands.Queue.DeclareOk)
    raw.send(1, commands.Confirm.Select())
    await raw.expect(commands.Confirm.SelectOk)


async def test_a_double_too_large_for_a_float_is_delivered_to_every_consumer(
    gw: AmqpGateway,
) -> None:
    queue = unique("poison")
    raw = await RawAmqp.connect(gw.port)
    try:
        await confirmed(raw, queue)
        sent = table(entry(b"big", b"d", struct.pack(">d", 1e300)))
        publish_with_headers(raw, queue, b"hello", sent)
        await raw.expect(commands.Basic.Ack)
        publish_with_headers(raw, queue, b"again", sent)
        await raw.expect(commands.Basic.Ack)
        assert await get_headers(raw, queue) == sent
    finally:
        raw.close()
    # A real client consumes the other one, header and all, and its channel stays open.
    async with await aio_pika.connect(gw.url) as conn:
        channel = await conn.channel()
        q = await channel.declare_queue(queue, passive=True)
        message = await q.get(timeout=5)
        assert message is not None
        assert message.body == b"again" and message.headers["big"] == 1e300
        await message.ack()
        await channel.declare_queue(unique(), auto_delete=True)  # the channel still works


async def test_headers_arrive_with_the_types_values_and_names_they_were_sent_with(
    gw: AmqpGateway,
) -> None:
    queue = unique("types")
    name = b"k" * 200
    sent = table(
        entry(b"a-double", b"d", struct.pack(">d", 0.1)),
        entry(b"b-tiny", b"d", struct.pack(">d", 1e-50)),
        entry(b"c-float", b"f", struct.pack(">f", 0.5)),
        entry(b"d-bytes", b"S", struct.pack(">I", 2) + b"\xff\xfe"),
        entry(b"e-array", b"x", struct.pack(">I", 2) + b"\xff\xfe"),
        entry(b"f-nested", b"F", table(entry(name, b"S", struct.pack(">I", 1) + b"x"))),
        entry(name[:-1] + b"j", b"b", b"\x07"),
        entry(name, b"S", struct.pack(">I", 2) + b"hi"),
    )
    raw = await RawAmqp.connect(gw.port)
    try:
        await confirmed(raw, queue)
        publish_with_headers(raw, queue, b"body", sent)
        await raw.expect(commands.Basic.Ack)
        assert await get_headers(raw, queue) == sent
    finally:
        raw.close()


async def test_integers_and_timestamps_arrive_with_their_own_types_and_values(
    gw: AmqpGateway,
) -> None:
    """Every integer type (a long 5 stays a long; 'L' 2**64-1 stays itself) and timestamps of
    2**32 seconds and more (not taken for milliseconds), in headers and in the `timestamp`
    property."""
    queue = unique("ints")
    sent = table(
        entry(b"a", b"l", struct.pack(">q", 5)),
        entry(b"b", b"L", struct.pack(">Q", 2**64 - 1)),
        entry(b"c", b"i", struct.pack(">I", 5)),
        entry(b"d", b"u", struct.pack(">H", 5)),
        entry(b"e", b"I", struct.pack(">i", -1)),
        entry(b"f", b"B", struct.pack(">B", 255)),
        entry(b"g", b"T", struct.pack(">Q", 1_700_000_000_123)),
        entry(b"h", b"A", struct.pack(">I", 9) + b"l" + struct.pack(">q", 7)),
    )
    stamp = struct.pack(">Q", 2**64 - 1)  # any 64 bits: past the year 9999 too
    raw = await RawAmqp.connect(gw.port)
    try:
        await confirmed(raw, queue)
        raw.send(1, reply(commands.Basic.Publish, exchange="", routing_key=queue))
        flags = HEADERS_FLAG | 0x0040  # headers and timestamp
        payload = struct.pack(">HHQH", 60, 0, 1, flags) + sent + stamp
        raw.send_raw(raw_frame(2, 1, payload) + raw_frame(3, 1, b"x"))
        await raw.expect(commands.Basic.Ack)
        raw.send(1, commands.Basic.Get(queue=queue, no_ack=True))
        _, (kind, header), _ = await raw_frames(raw, 3)
        assert kind == 2 and struct.unpack_from(">H", header, 12)[0] == flags
        assert header[14:] == sent + stamp
    finally:
        raw.close()


async def test_a_header_name_that_comes_twice_is_refused_at_publish(gw: AmqpGateway) -> None:
    """A dictionary cannot hold both values: the publish is refused naming the header, rather
    than confirmed and delivered with one of them."""
    queue = unique("twice")
    raw = await RawAmqp.connect(gw.port)
    try:
        await confirmed(raw, queue)
        publish_with_headers(raw, queue, b"body", table(
            entry(b"v", b"S", struct.pack(">I", 5) + b"first"),
            entry(b"v", b"S", struct.pack(">I", 6) + b"second")))
        channel, close = await raw.closed_with()
        assert (channel, close.reply_code) == (1, 406)
        assert "'v'" in close.reply_text or "v" in close.reply_text
    finally:
        raw.close()
