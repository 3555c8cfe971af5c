"""`--max-held-mb`: the bodies one principal's deliveries hold unsettled are bounded, its
consumers and pulls together.

A client that pulled a backlog with a long invisible time made the gateway hold every body
until it settled them (1,000 pulls of 1 MiB: +991 MiB), and each stream a client opened and
never read held 64 MiB. Now its principal gets nothing more at the limit, until it settles some
(or they time out), and the other principals go on: gRPC `Receive` and `Consume` with two
tokens, and AMQP `basic.get` with aio-pika.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import grpc
import pulsar
import pytest
from auth_clients import bearer

from gateway.engine.clock import SystemClock
from gateway.errors import InvalidArgument
from gateway.server.app import GatewayApp, running_gateway
from gateway.server.config import build
from gateway.v1 import gateway_pb2, gateway_pb2_grpc
from tests.amqp_front import amqp_gateway, unique
from tests.e2e.pulsar_stack import QUIET, run

TOKENS = """
[[principal]]
name = "alice"
token = "alice-secret"
publish = ["orders", "alice-*"]
consume = ["orders", "alice-*"]
groups = ["alice", "alice-*"]

[[principal]]
name = "bob"
token = "bob-secret"
publish = ["orders"]
consume = ["orders"]
groups = ["bob"]
"""
ALICE = bearer("alice-secret")
BOB = bearer("bob-secret")
BODY = b"x" * (300 * 1024)
FITS = 4
"""Bodies of 300 KiB one principal's pulls hold within 1 MiB: three fit, the fourth passes the
limit and is the last."""


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens),
                               max_held_mb=1) as running:
        yield running


def receive(group: str, most: int = 20, wait_ms: int = 0) -> gateway_pb2.ReceiveRequest:
    return gateway_pb2.ReceiveRequest(topic="orders", group=group, policy="rocketmq-simple",
                                      max_messages=most, invisible_ms=3_600_000,
                                      wait_ms=wait_ms)


async def test_a_principal_at_its_limit_gets_nothing_until_it_settles(app: GatewayApp) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        gw = gateway_pb2_grpc.GatewayStub(channel)
        await gw.Publish(gateway_pb2.PublishRequest(
            topic="orders", messages=[gateway_pb2.Message(body=BODY)] * 10), metadata=ALICE)
        first = await gw.Receive(receive("alice"), metadata=ALICE)
        assert len(first.deliveries) == FITS
        assert not (await gw.Receive(receive("alice"), metadata=ALICE)).deliveries
        # bob's pulls have their own room (his group reads the same topic).
        assert len((await gw.Receive(receive("bob"), metadata=BOB)).deliveries) == FITS
        # alice waits at her limit; settling one lets the waiting receive go on.
        waiting = asyncio.ensure_future(
            gw.Receive(receive("alice", wait_ms=20_000), metadata=ALICE))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        settle = gateway_pb2.SettleRequest(settlements=[
            gateway_pb2.Settlement(receipt=d.receipt, ack=gateway_pb2.Ack())
            for d in first.deliveries])
        reply = await gw.Settle(settle, metadata=ALICE)
        assert all(r.ok for r in reply.results)
        got = await asyncio.wait_for(waiting, 10)
        assert len(got.deliveries) == FITS
        assert all(d.body == BODY for d in got.deliveries)


class Stream:
    """A gRPC Consume stream of one principal that collects its deliveries and settles none
    unless told."""

    def __init__(self, gw: gateway_pb2_grpc.GatewayStub, group: str, metadata: object) -> None:
        self.requests: asyncio.Queue[gateway_pb2.ConsumeRequest | None] = asyncio.Queue()
        self.requests.put_nowait(gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
            topic="orders", group=group, policy="rocketmq", prefetch=100)))
        self.deliveries: list[gateway_pb2.Delivery] = []
        self.call = gw.Consume(self._requests(), metadata=metadata)
        self.task = asyncio.ensure_future(self._read())

    async def _requests(self) -> AsyncIterator[gateway_pb2.ConsumeRequest]:
        while (item := await self.requests.get()) is not None:
            yield item

    async def _read(self) -> None:
        async for response in self.call:
            if response.HasField("deliveries"):
                self.deliveries.extend(response.deliveries.deliveries)

    def ack(self, delivery: gateway_pb2.Delivery) -> None:
        self.requests.put_nowait(gateway_pb2.ConsumeRequest(settle=gateway_pb2.SettleBatch(
            settlements=[gateway_pb2.Settlement(receipt=delivery.receipt,
                                                ack=gateway_pb2.Ack())])))

    async def close(self) -> None:
        self.requests.put_nowait(None)
        self.call.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await self.task


async def settled_down(streams: list[Stream]) -> int:
    """Deliveries the streams got, once no more came for half a second."""
    count = -1
    while (now := sum(len(s.deliveries) for s in streams)) != count:
        count = now
        await asyncio.sleep(0.5)
    return count


async def test_a_principals_streams_together_hold_at_most_its_limit(app: GatewayApp) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        gw = gateway_pb2_grpc.GatewayStub(channel)
        await gw.Publish(gateway_pb2.PublishRequest(
            topic="orders", messages=[gateway_pb2.Message(body=BODY)] * 10), metadata=ALICE)
        alice = [Stream(gw, f"alice-{i}", ALICE) for i in range(3)]
        bob = Stream(gw, "bob", BOB)
        try:
            assert await settled_down(alice) == FITS  # three groups, one principal's room
            assert await settled_down([bob]) == FITS  # bob's own room
            holder = next(s for s in alice if s.deliveries)
            holder.ack(holder.deliveries[0])
            assert await settled_down(alice) == FITS + 1
        finally:
            for stream in [*alice, bob]:
                await stream.close()


async def test_amqp_basic_get_at_the_limit_answers_empty_until_one_is_acked(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with amqp_gateway(tmp_path / "data", tokens_file=str(tokens), max_held_mb=1,
                            time_scale=1.0) as gw:
        connection = await aio_pika.connect(gw.url_for("alice", "alice-secret"))
        async with connection:
            channel = await connection.channel()
            name = unique("alice")
            queue = await channel.declare_queue(name, durable=True)
            for _ in range(6):
                await channel.default_exchange.publish(aio_pika.Message(BODY), routing_key=name)
            held = [await queue.get(timeout=5) for _ in range(FITS)]
            assert await queue.get(fail=False) is None  # at the limit
            await held[0].ack()
            again = await queue.get(timeout=5)
            assert again.body == BODY
            await again.ack()
            for message in held[1:]:
                await message.ack()


async def test_a_pulsar_client_at_the_limit_gets_more_once_it_acks(tmp_path: Path) -> None:
    """The official pulsar-client, with a receiver queue far larger than the limit: its
    consumer gets what fits (no error, no disconnect), and more after each ack."""
    async with running_gateway(tmp_path / "data", clock=SystemClock(), max_held_mb=1,
                               pulsar_listen="127.0.0.1:0") as app:
        client = pulsar.Client(f"pulsar://127.0.0.1:{app.front_ends['pulsar'].port}",
                               operation_timeout_seconds=10, logger=QUIET)
        try:
            consumer = await run(client.subscribe, "orders", "app",
                                 consumer_type=pulsar.ConsumerType.Shared,
                                 receiver_queue_size=1000)
            producer = await run(client.create_producer, "orders", batching_enabled=False)
            for _ in range(8):
                await run(producer.send, BODY)
            got = [await run(consumer.receive, 5000) for _ in range(FITS)]
            with pytest.raises(pulsar.Timeout):
                await run(consumer.receive, 1000)
            for message in got:
                await run(consumer.acknowledge, message)
            more = [await run(consumer.receive, 5000) for _ in range(FITS)]
            assert all(m.data() == BODY for m in more)
            for message in more:
                await run(consumer.acknowledge, message)
        finally:
            await run(client.close)


@pytest.mark.parametrize("value", [0, -1, 65537])
def test_the_limit_is_checked(value: int, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="max_held_mb"):
        build({"data_dir": str(tmp_path), "max_held_mb": value})
