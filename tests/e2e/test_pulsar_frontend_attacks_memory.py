"""A client that gives its consumers permits and never reads its socket: the front end must
not buffer every message those permits allow for it. Each consumer's pump writes in bounded
chunks, waiting for the socket to drain between them, and takes engine credit only once what
it wrote has drained, so such a client holds about one chunk per consumer in the gateway's
socket buffer."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import encode_command
from tests.pulsar_raw import Cmd, RawClient

BODY = 256 * 1024
MESSAGES = 24
CONSUMERS = 4


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[PulsarFrontEnd]:
    async with raw.front_end(tmp_path) as (instance, _):
        yield instance


async def test_a_client_that_never_reads_holds_little_per_consumer(
    front: PulsarFrontEnd,
) -> None:
    producer = await RawClient.open(front.port)
    producer.send(raw.producer(1, 1, "big"))
    await producer.expect(Cmd.PRODUCER_SUCCESS)
    for seq in range(MESSAGES):
        producer.send(raw.send(1, seq), raw.meta("big", seq), bytes(BODY))
        await producer.expect(Cmd.SEND_RECEIPT)
    await producer.close()

    before = set(front._connections)
    client = await RawClient.open(front.port)
    sock = client.writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    (connection,) = set(front._connections) - before  # the front end's side of this client
    for i in range(CONSUMERS):
        cmd = raw.subscribe(i, i, pb.CommandSubscribe.Exclusive)
        cmd.subscribe.subscription = f"s{i}"
        client.send(cmd)
        await client.expect(Cmd.SUCCESS)
    server_side = connection._writer.transport
    client.writer.write(b"".join(encode_command(raw.flow(i, 1000))
                                 for i in range(CONSUMERS)))  # and never read again
    most, last, still = 0, -1, 0
    while still < 10:  # until the gateway's buffer for this client has stopped changing
        await asyncio.sleep(0.05)
        now = server_side.get_write_buffer_size()
        most = max(most, now)
        still = still + 1 if now == last else 0
        last = now
    # Everything the permits allow would be CONSUMERS * MESSAGES * BODY (24 MiB).
    assert most < CONSUMERS * 4 * BODY, f"{most} bytes buffered for a client that never reads"
    await client.close()
