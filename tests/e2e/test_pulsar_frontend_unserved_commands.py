"""Commands the front end does not serve (third attack round): topic-list watching, consumer
stats, the transaction commands. They were ignored, so the client waited its whole operation
timeout (30 s by default) for an answer. One with a request id is now answered ERROR
NotAllowedError naming the command, and the connection goes on. (Pattern subscriptions, whose
GET_TOPICS_OF_NAMESPACE was refused here too, are served: `test_pulsar_frontend_patterns`.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from gateway.engine.engine import Engine
from tests.pulsar_raw import Cmd, RawClient


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with raw.front_end(tmp_path) as made:
        yield made


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def unserved(kind: int, body: bytes) -> bytes:
    """A frame of command `kind` whose body (not in the front end's proto subset) is `body`."""
    head = Cmd(type=kind).SerializeToString()  # type: ignore[arg-type]
    return raw.command_frame(head + varint(kind << 3 | 2) + varint(len(body)) + body)


@pytest.mark.parametrize(("kind", "body", "named"), [
    # request_id = 1, watcher_id = 2, namespace = 3
    (Cmd.WATCH_TOPIC_LIST, varint(8) + varint(7) + b"\x10\x01\x1a\x0epublic/default",
     "watching"),
    (Cmd.NEW_TXN, varint(8) + varint(2**64 - 1), "transactions"),
    (Cmd.TC_CLIENT_CONNECT_REQUEST, varint(8) + varint(0) + b"\x10\x00", "transactions"),
    (Cmd.CONSUMER_STATS, b"\x20\x01" + varint(8) + varint(9), "stats"),  # consumer_id first
])
async def test_an_unserved_command_with_a_request_id_is_refused(
    stack: tuple[PulsarFrontEnd, Engine], kind: int, body: bytes, named: str,
) -> None:
    front, _ = stack
    client = await RawClient.open(front.port)
    client.writer.write(unserved(kind, body))
    error = (await client.expect(Cmd.ERROR)).command.error
    request_id = {Cmd.NEW_TXN: 2**64 - 1, Cmd.TC_CLIENT_CONNECT_REQUEST: 0,
                  Cmd.CONSUMER_STATS: 9}.get(kind, 7)
    assert (error.request_id, error.error) == (request_id, raw.pb.NotAllowedError)
    assert Cmd.Type.Name(kind) in error.message and named in error.message
    client.send(Cmd(type=Cmd.PING, ping=raw.pb.CommandPing()))
    await client.expect(Cmd.PONG)  # the connection goes on
    await client.close()


@pytest.mark.parametrize("body", [b"", b"\x12\x03abc", b"\x08", b"\x08\xff\xff", b"\x0f"])
async def test_an_unserved_command_without_a_readable_request_id_is_ignored(
    stack: tuple[PulsarFrontEnd, Engine], body: bytes,
) -> None:
    front, _ = stack
    client = await RawClient.open(front.port)
    client.writer.write(unserved(Cmd.NEW_TXN, body))
    client.send(Cmd(type=Cmd.PING, ping=raw.pb.CommandPing()))
    await client.expect(Cmd.PONG)
    await client.close()
