"""Frames out of place, over raw sockets, against the gateway's AMQP front end and the real
RabbitMQ on 127.0.0.1:5672: the connection is closed with the reply code RabbitMQ uses. Before,
the gateway answered a content frame on a channel never opened with 504 (RabbitMQ: 505
UNEXPECTED_FRAME), a heartbeat with a payload with 505 (RabbitMQ: 501 FRAME_ERROR) and a channel
method on channel 0 with 503 (RabbitMQ: 504 CHANNEL_ERROR)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pamqp import commands, frame, header

from adapters.amqp.frontend.framing import method_frame
from tests.amqp_front import RawAmqp, amqp_gateway, raw_frame


@pytest.fixture(params=["gateway", "rabbitmq"])
async def port(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[int]:
    if request.param == "rabbitmq":
        yield 5672
        return
    async with amqp_gateway(tmp_path / "data") as gw:
        yield gw.port


def _header(channel: int, size: int) -> bytes:
    return frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties()), channel)


def _header_with_trailing_bytes(properties: commands.Basic.Properties) -> list[bytes]:
    """A publish whose content header carries bytes after its last property (RabbitMQ: 541
    INTERNAL_ERROR; before, the gateway ignored them and took the message)."""
    good = frame.marshal(header.ContentHeader(0, 3, properties), 1)
    payload = good[7:-1] + b"\x00\x01junk"
    return [method_frame(1, commands.Basic.Publish(routing_key="nowhere")),
            raw_frame(2, 1, payload), raw_frame(3, 1, b"abc")]


CASES = {
    "a body frame on a channel never opened": ([raw_frame(3, 9, b"abc")], 505),
    "a content header on a channel never opened": ([_header(9, 3)], 505),
    "a heartbeat with a payload": ([raw_frame(8, 0, b"abc")], 501),
    "a heartbeat on channel 1": ([raw_frame(8, 1, b"")], 505),
    "queue.declare on channel 0": ([method_frame(0, commands.Queue.Declare(queue="q"))], 504),
    "basic.qos on channel 0": ([method_frame(0, commands.Basic.Qos(prefetch_count=1))], 504),
    "a content header with bytes after its properties":
        (_header_with_trailing_bytes(commands.Basic.Properties()), 541),
    "a content header with bytes after its headers table": (_header_with_trailing_bytes(
        commands.Basic.Properties(headers={"a": 1}, content_type="text/plain")), 541),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_frame_out_of_place_closes_the_connection_with_rabbitmqs_code(
    port: int, case: str,
) -> None:
    frames, code = CASES[case]
    raw = await RawAmqp.connect(port)
    try:
        for data in frames:
            raw.send_raw(data)
        channel, close = await raw.closed_with()
        assert (channel, type(close), close.reply_code) == (0, commands.Connection.Close, code)
    finally:
        raw.close()
