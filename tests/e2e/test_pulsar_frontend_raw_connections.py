"""Connection limits of the Pulsar front end: the CONNECT deadline and size, connections per
listener, producers and consumers per connection, and the read budget that holds back floods."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from tests.pulsar_raw import WAIT_S, Cmd, RawClient

Front = Callable[..., AbstractAsyncContextManager[PulsarFrontEnd]]


@pytest.fixture
def front(tmp_path: Path) -> Front:
    @asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[PulsarFrontEnd]:
        async with running_gateway(
            data_dir=tmp_path / "data", listen="127.0.0.1:0", clock=SystemClock()
        ) as app:
            instance = PulsarFrontEnd(app.engine, "127.0.0.1", 0, keepalive_s=30, **options)
            await instance.start()
            try:
                yield instance
            finally:
                await instance.stop()

    return make


async def test_a_connection_without_connect_is_closed_at_the_deadline(front: Front) -> None:
    async with front(handshake_timeout_s=0.2) as instance:
        silent = await RawClient.open(instance.port, connect=False)
        partial = await RawClient.open(instance.port, connect=False)
        partial.writer.write(struct.pack(">I", 100))
        assert await silent.closed()
        assert await partial.closed()
        await RawClient.open(instance.port)  # a prompt client is served


async def test_a_large_connect_frame_closes_the_connection(front: Front) -> None:
    async with front() as instance:
        client = await RawClient.open(instance.port, connect=False)
        cmd = Cmd(type=Cmd.CONNECT)
        cmd.connect.client_version = "raw-test"
        cmd.connect.auth_data = bytes(100 * 1024)
        client.send(cmd)
        assert await client.closed()


async def test_connections_beyond_the_cap_are_refused(front: Front) -> None:
    async with front(max_connections=2) as instance:
        first = await RawClient.open(instance.port)
        await RawClient.open(instance.port)
        third = await RawClient.open(instance.port, connect=False)
        error = (await third.expect(Cmd.ERROR)).command.error
        assert error.error == pb.ServiceNotReady and "2 connections" in error.message
        assert await third.closed()
        await first.close()
        for _ in range(50):  # the front end notices the close on its own time
            again = await RawClient.open(instance.port, connect=False)
            again.send(raw_connect())
            reply = await again.read()
            if reply.command.type == Cmd.CONNECTED:
                return
        raise AssertionError("a freed connection slot was not reused")


def raw_connect() -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.CONNECT)
    cmd.connect.client_version = "raw-test"
    cmd.connect.protocol_version = 19
    return cmd


async def test_producers_and_consumers_per_connection_are_capped(front: Front) -> None:
    async with front(max_producers=2, max_consumers=1) as instance:
        client = await RawClient.open(instance.port)
        for producer_id in (1, 2):
            client.send(raw.producer(producer_id, producer_id))
            await client.expect(Cmd.PRODUCER_SUCCESS)
        client.send(raw.producer(3, 3))
        error = (await client.expect(Cmd.ERROR)).command.error
        assert (error.request_id, error.error) == (3, pb.ProducerBusy)
        close = Cmd(type=Cmd.CLOSE_PRODUCER)
        close.close_producer.producer_id = 1
        close.close_producer.request_id = 4
        client.send(close)
        await client.expect(Cmd.SUCCESS)
        client.send(raw.producer(3, 5))
        await client.expect(Cmd.PRODUCER_SUCCESS)

        client.send(raw.subscribe(1, 6, pb.CommandSubscribe.Shared))
        await client.expect(Cmd.SUCCESS)
        client.send(raw.subscribe(2, 7, pb.CommandSubscribe.Shared))
        error = (await client.expect(Cmd.ERROR)).command.error
        assert (error.request_id, error.error) == (7, pb.ConsumerBusy)


async def test_a_flood_of_sends_passes_through_a_small_read_budget(front: Front) -> None:
    size = 64 * 1024
    async with front(max_message_size=size, read_budget_bytes=4 * size) as instance:
        client = await RawClient.open(instance.port)
        client.send(raw.producer(1, 1, "flood"))
        await client.expect(Cmd.PRODUCER_SUCCESS)
        body = bytes(size - 1024)
        for seq in range(200):
            client.send(raw.send(1, seq), raw.meta("flood", seq), body)
        for seq in range(200):
            receipt = (await client.expect(Cmd.SEND_RECEIPT, timeout=WAIT_S * 4)).command
            assert receipt.send_receipt.sequence_id == seq


async def test_a_consumer_holds_at_most_its_unacked_limit(front: Front) -> None:
    async with front(max_unacked_per_consumer=3) as instance:
        client = await RawClient.open(instance.port)
        client.send(raw.producer(1, 1, "w"))
        await client.expect(Cmd.PRODUCER_SUCCESS)
        for seq in range(5):
            client.send(raw.send(1, seq), raw.meta("w", seq), f"u{seq}".encode())
            await client.expect(Cmd.SEND_RECEIPT)
        client.send(raw.subscribe(7, 2, pb.CommandSubscribe.Shared))
        await client.expect(Cmd.SUCCESS)
        client.send(raw.flow(7, 10))
        first = [await client.expect(Cmd.MESSAGE) for _ in range(3)]
        assert [f.payload for f in first] == [b"u0", b"u1", b"u2"]
        ping = Cmd(type=Cmd.PING)
        ping.ping.SetInParent()
        client.send(ping)
        await client.expect(Cmd.PONG)  # nothing more was sent before it
        ack = Cmd(type=Cmd.ACK)
        ack.ack.consumer_id = 7
        ack.ack.ack_type = pb.CommandAck.Individual
        ack.ack.message_id.add().CopyFrom(first[0].command.message.message_id)
        client.send(ack)
        assert (await client.expect(Cmd.MESSAGE)).payload == b"u3"
        client.send(ping)
        await client.expect(Cmd.PONG)


async def test_a_client_that_does_not_read_stops_being_read(front: Front) -> None:
    """Replies to a client that never reads must not pile up in the front end: it stops reading
    from that client (as Pulsar does) instead of buffering every reply."""
    async with front() as instance:
        client = await RawClient.open(instance.port)
        ask = Cmd(type=Cmd.GET_SCHEMA)
        ask.getSchema.topic = "s" * 500  # echoed in the reply
        ask.getSchema.request_id = 1
        client.writer.write(raw.command_frame(ask.SerializeToString()) * 40_000)  # 21 MB
        transport = client.writer.transport
        (connection,) = instance._connections  # the front end's side of this client
        server_side = connection._writer.transport
        most, left, since = 0, transport.get_write_buffer_size(), 0
        while since < 10:  # until the client's own buffer has stopped draining for 0.5 s
            await asyncio.sleep(0.05)
            most = max(most, server_side.get_write_buffer_size())
            now = transport.get_write_buffer_size()
            since = since + 1 if now == left else 0
            left = now
            if left == 0:
                break
        assert most < 2 * 1024 * 1024, f"{most} bytes of replies buffered"
        assert left > 0, "every request was read although no reply was"
        # Stopping does not wait for a client that never reads (it used to wait forever).
        await asyncio.wait_for(instance.stop(), 15)
