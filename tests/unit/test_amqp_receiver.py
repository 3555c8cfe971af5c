"""`BufferedFrameReceiver` against aiormq's own receiver: the same frames out of the same bytes,
however the bytes arrive, and the same way of ending."""

from __future__ import annotations

import asyncio
from typing import Any

import pamqp.frame
import pytest
from aiormq.exceptions import AMQPConnectionError, InvalidFrameError, ProtocolSyntaxError
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands as spec
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from adapters.amqp import receiver
from tests.unit.test_amqp_wire import fields

FRAMES: list[Any] = [
    spec.Connection.Start(server_properties={"product": "x"}),
    spec.Basic.Deliver(consumer_tag="c", delivery_tag=1, routing_key="q"),
    ContentHeader(body_size=3, properties=spec.Basic.Properties(message_id="m", headers={"a": 1})),
    ContentBody(b"abc"),
    spec.Basic.Ack(delivery_tag=9, multiple=True),
    spec.Basic.ConsumeOk(consumer_tag="c"),
    pamqp.heartbeat.Heartbeat(),
]


async def read_all(cls: type, chunks: list[bytes], eof: bool = True) -> tuple[list[Any], object]:
    """Every frame `cls` reads from `chunks` (fed as they come), and how reading ended."""
    reader = asyncio.StreamReader()
    frames_in = cls(reader)

    async def feed() -> None:
        for chunk in chunks:
            reader.feed_data(chunk)
            await asyncio.sleep(0)
        if eof:
            reader.feed_eof()

    feeder = asyncio.ensure_future(feed())
    got: list[Any] = []
    ended: object = None
    try:
        while True:
            got.append(fields(await asyncio.wait_for(frames_in.get_frame(), 1.0)))
    except StopAsyncIteration:
        ended = StopAsyncIteration
    except (AMQPConnectionError, TimeoutError) as exc:
        ended = type(exc)
    await feeder
    return got, ended


def stream(frames: list[Any]) -> bytes:
    return b"".join(
        pamqp.frame.marshal(frame, 0 if i == 0 else 1) for i, frame in enumerate(frames)
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(FRAMES[1:]), max_size=12), st.data())
def test_same_frames_however_the_bytes_arrive(frames: list[Any], data: st.DataObject) -> None:
    raw = stream(FRAMES[:1] + frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True) if b > a]
    truncate = data.draw(st.booleans())
    if truncate and chunks:
        chunks[-1] = chunks[-1][:-1]

    fast = asyncio.run(read_all(receiver.BufferedFrameReceiver, chunks))
    reference = asyncio.run(read_all(receiver._REFERENCE, chunks))
    assert fast == reference
    assert fast[1] is (AMQPConnectionError if truncate and chunks else StopAsyncIteration)


def test_a_server_answering_with_a_protocol_header_is_refused() -> None:
    async def first(cls: type) -> type:
        reader = asyncio.StreamReader()
        reader.feed_data(b"AMQP\x00\x00\x09\x01")
        with pytest.raises(ProtocolSyntaxError):
            await cls(reader).get_frame()
        return cls

    asyncio.run(first(receiver.BufferedFrameReceiver))
    asyncio.run(first(receiver._REFERENCE))


def test_frames_before_a_broken_one_are_handed_out_first() -> None:
    async def run() -> list[Any]:
        reader = asyncio.StreamReader()
        good = stream(FRAMES[:2])
        bad = bytes([1, 0, 1, 0, 0, 0, 4]) + b"\xff\xff\xff\xff" + b"\xce"  # unknown method
        reader.feed_data(good + bad)
        frames_in = receiver.BufferedFrameReceiver(reader)
        got = [fields(await frames_in.get_frame()) for _ in range(2)]
        with pytest.raises(InvalidFrameError):
            await frames_in.get_frame()
        return got

    assert asyncio.run(run()) == [fields(pamqp.frame.unmarshal(stream(FRAMES[:1]))),
                                  fields(pamqp.frame.unmarshal(stream(FRAMES[:2])[len(stream(FRAMES[:1])):]))]


def test_install_makes_aiormq_connections_use_it() -> None:
    import aiormq.connection

    receiver.install()
    assert aiormq.connection.FrameReceiver is receiver.BufferedFrameReceiver


def test_a_large_frame_in_small_pieces() -> None:
    """A 4 MiB body frame arriving 1 KiB at a time is one frame, as aiormq reads it."""
    raw = stream([FRAMES[0], ContentBody(bytes(range(256)) * 16384), FRAMES[4]])
    chunks = [raw[i : i + 1024] for i in range(0, len(raw), 1024)]
    fast = asyncio.run(read_all(receiver.BufferedFrameReceiver, chunks))
    assert fast == asyncio.run(read_all(receiver._REFERENCE, chunks))
    assert len(fast[0]) == 3 and fast[1] is StopAsyncIteration
