"""A flood on one AMQP connection does not hold other clients: what a connection sent is read a
turn's worth of work at a time, and the event loop serves everyone else between turns.

Before, every socket read (256 KiB) was decoded in one go: a flood of messages with 1,000 flat
headers each held the event loop for each read (43 messages, 43,000 header values), a
flood of tiny messages likewise (4,600 messages per read), and another client's confirmed
publish took 0.7-1 s all through the flood. The flood here is counted, not timed: between two
turns of the event loop (a callback that schedules itself again each turn) the gateway decodes
at most the content headers one turn's budget allows, and a victim's confirm arrives while the
flood is still being read."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from adapters.amqp.frontend import framing
from adapters.amqp.frontend.connection import READ_TURN
from adapters.amqp.frontend.context import Limits
from adapters.amqp.frontend.framing import method_frame, reply
from tests.amqp_front import (
    AmqpGateway,
    PerTurn,
    RawAmqp,
    amqp_gateway,
    flood_and_victim,
    raw_frame,
    stored,
    unique,
)

HEADERS_FLAG = 0x2000


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data") as gateway:
        yield gateway


def flat_headers(count: int) -> bytes:
    """A table of `count` boolean headers with short names (the cheapest bytes per value)."""
    entries = b"".join(bytes([len(k)]) + k + b"t\x01"
                       for k in (f"{i:x}".encode() for i in range(count)))
    return struct.pack(">I", len(entries)) + entries


def message(queue: str, headers: int) -> bytes:
    table = flat_headers(headers)
    content = struct.pack(">HHQH", 60, 0, 1, HEADERS_FLAG) + table
    return (method_frame(1, reply(commands.Basic.Publish, exchange="", routing_key=queue))
            + raw_frame(2, 1, content) + raw_frame(3, 1, b"x"))


class Turns(PerTurn):
    """Counts the content headers the gateway decodes (`decoded`), and how many in each
    event-loop turn."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        decode = framing.decode

        def counting(kind: int, channel: int, payload: bytes) -> Any:
            if kind == framing.HEADER:
                self.total += 1
            return decode(kind, channel, payload)

        monkeypatch.setattr(framing, "decode", counting)

    @property
    def decoded(self) -> int:
        return self.total


@pytest.mark.parametrize(("headers", "count"), [(1000, 400), (0, 40_000)],
                         ids=["flat-headers", "tiny-messages"])
async def test_a_flood_is_read_a_turn_at_a_time_and_others_are_served_meanwhile(
    gw: AmqpGateway, monkeypatch: pytest.MonkeyPatch, headers: int, count: int
) -> None:
    attacker, flood_queue, victim, victim_queue = await flood_and_victim(gw.port)
    try:
        one = message(flood_queue, headers)
        turns = Turns(monkeypatch)
        turns.start()
        attacker.send_raw(one * count)  # all of it at once: the socket is full for a while
        while turns.decoded < 20:
            await asyncio.sleep(0.001)
        victim.publish(1, b"v", victim_queue)
        ack = await victim.expect(commands.Basic.Ack, timeout=60)
        at_confirm = turns.decoded
        assert ack.delivery_tag == 1
        # The victim was served while the flood was still being read.
        assert at_confirm < count, f"the victim's confirm came after all {count} flood messages"
        await attacker.writer.drain()
        while turns.decoded < count:
            await asyncio.sleep(0.01)
        turns.stop()
        # No turn decoded much more than its budget allows (twice, for slack; before, a turn
        # decoded a whole socket read: 43 of these header-heavy messages, 4,600 tiny ones).
        per_message = framing.FRAME_WORK * 3 + framing.VALUE_WORK * headers  # at least
        assert turns.most <= 2 * (READ_TURN // per_message + 1), (
            f"{turns.most} content headers decoded in one turn of the event loop")

        # Nothing was lost: every flood message is stored.
        assert await stored(attacker, flood_queue, count, tries=600) == count
    finally:
        attacker.close()
        victim.close()


async def test_properties_of_messages_still_arriving_count_against_their_limit(
    gw: AmqpGateway,
) -> None:
    """A message whose content header came and whose body did not is held, its properties
    decoded, until the body comes: one connection may hold at most so much of that
    (`max_partial_bytes`, 64 MiB), counting the properties at what they take in memory, not only
    the body bytes. Before, only body bytes counted: 2,000 channels each holding a content header
    of 1,000 headers and no body took the gateway from 110 to 370 MB for one connection (and a
    thousand connections could each do it); now the connection is closed with 506."""
    raw = await RawAmqp.connect(gw.port, open_channel=None)
    try:
        queue = unique()
        content = struct.pack(">HHQH", 60, 0, 10, HEADERS_FLAG) + flat_headers(1000)
        channels = 1000
        for number in range(1, channels + 1):
            raw.send(number, commands.Channel.Open())
        for number in range(1, channels + 1):
            raw.send_raw(method_frame(number, reply(commands.Basic.Publish, exchange="",
                                                    routing_key=queue))
                         + raw_frame(2, number, content))  # and no body
        channel, close = await raw.closed_with(timeout=30)
        assert (channel, close.reply_code) == (0, 506)
        assert "still arriving" in close.reply_text
        assert (close.class_id, close.method_id) == (60, 40)
    finally:
        raw.close()
    other = await RawAmqp.connect(gw.port)  # everyone else is served
    other.close()


async def test_binding_again_does_not_write_out_every_bindings_arguments(
    gw: AmqpGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new binding is compared with the exchange's bindings (a binding that exists already is
    not added twice) without writing out their arguments again: before, every `queue.bind` to
    a headers exchange wrote both argument tables as text for each binding there (71 ms a bind
    at 100 bindings of 1,000 arguments, growing with every one, the event loop held)."""
    from adapters.amqp.frontend import topology

    written = 0
    to_text = topology.table_to_text

    def counting(table: Any) -> str:
        nonlocal written
        written += 1
        return to_text(table)

    monkeypatch.setattr(topology, "table_to_text", counting)
    raw = await RawAmqp.connect(gw.port)
    try:
        queue = unique()
        raw.send(1, commands.Queue.Declare(queue=queue))
        await raw.expect(commands.Queue.DeclareOk)
        arguments: dict[str, Any] = {"x-match": "any", **{f"a{i}": "v" for i in range(50)}}
        for n in range(100):
            raw.send(1, commands.Queue.Bind(queue=queue, exchange="amq.headers",
                                            arguments={**arguments, "n": n}))
        for _ in range(100):
            await raw.expect(commands.Queue.BindOk)
        before = written
        raw.send(1, commands.Queue.Bind(queue=queue, exchange="amq.headers",
                                        arguments={**arguments, "n": 5}))  # there already
        raw.send(1, commands.Queue.Bind(queue=queue, exchange="amq.headers",
                                        arguments={**arguments, "n": 100}))  # a new one
        await raw.expect(commands.Queue.BindOk)
        await raw.expect(commands.Queue.BindOk)
        assert written - before <= 4, f"{written - before} argument tables written for 2 binds"
        # Both are bound once: a message matching n=5 reaches the queue once.
        raw.send(1, commands.Confirm.Select())
        await raw.expect(commands.Confirm.SelectOk)
        raw.publish(1, b"m", "", exchange="amq.headers",
                    properties=commands.Basic.Properties(headers={"n": 5}))
        await raw.expect(commands.Basic.Ack)
        raw.send(1, commands.Queue.Declare(queue=queue, passive=True))
        ok = await raw.expect(commands.Queue.DeclareOk)
        assert ok.message_count == 1
    finally:
        raw.close()


async def test_messages_still_arriving_are_bounded_over_every_connection(tmp_path: Path) -> None:
    """Each connection may hold `max_partial_bytes` of messages still arriving; over every
    connection together at most `total_partial_bytes`. Before, only each connection was
    bounded: connections each announcing 16 messages of 4 MiB and sending all but their last
    bytes took the gateway up 61 MiB each, for as many connections as it takes (1,000). A frame
    that would pass the whole closes its connection (506); one that completes a message is
    never refused by it, so a whole message still goes through."""
    limits = Limits(total_partial_bytes=3 << 20)  # room for two stalled connections of 1.5 MiB
    async with amqp_gateway(tmp_path / "data", front_end_settings={"amqp": limits}) as gw:
        queue = unique()
        stalled: list[RawAmqp] = []
        try:
            for _ in range(3):
                raw = await RawAmqp.connect(gw.port)
                stalled.append(raw)
                raw.send_raw(method_frame(1, reply(commands.Basic.Publish, exchange="",
                                                   routing_key=queue))
                             + raw_frame(2, 1, struct.pack(">HHQH", 60, 0, 4 << 20, 0)))
                for _ in range(24):  # 1.5 MiB of its 4, in frames of 64 KiB
                    raw.send_raw(raw_frame(3, 1, bytes(64 << 10)))
                await asyncio.sleep(0.2)
            channel, close = await stalled[-1].closed_with(timeout=30)
            assert (channel, close.reply_code) == (0, 506)
            assert "on every connection together" in close.reply_text
            # A message that arrives whole in one frame is still taken while the others stall.
            other = await RawAmqp.connect(gw.port)
            try:
                other.send(1, commands.Queue.Declare(queue=queue))
                await other.expect(commands.Queue.DeclareOk, timeout=30)
                other.send_raw(message(queue, 1))
                assert await stored(other, queue, 1, tries=300) == 1
            finally:
                other.close()
        finally:
            for raw in stalled:
                raw.close()
