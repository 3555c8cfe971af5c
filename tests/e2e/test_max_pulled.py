"""`--max-pulled-mb`: the bodies one principal's pulled deliveries hold unsettled are bounded.

A client that pulled a backlog with a long invisible time made the gateway hold every body
until it settled them (300 pulls of 1 MiB: +305 MB, bounded by nothing but the backlog). Now
its principal gets nothing more at the limit, until it settles some (or they time out), and the
other principals go on: gRPC `Receive` with two tokens, and AMQP `basic.get` with aio-pika.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import grpc
import pytest
from auth_clients import bearer

from gateway.errors import InvalidArgument
from gateway.server.app import GatewayApp, running_gateway
from gateway.server.config import build
from gateway.v1 import gateway_pb2, gateway_pb2_grpc
from tests.amqp_front import amqp_gateway, unique

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
                               max_pulled_mb=1) as running:
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


async def test_amqp_basic_get_at_the_limit_answers_empty_until_one_is_acked(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with amqp_gateway(tmp_path / "data", tokens_file=str(tokens), max_pulled_mb=1,
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


@pytest.mark.parametrize("value", [0, -1, 65537])
def test_the_limit_is_checked(value: int, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="max_pulled_mb"):
        build({"data_dir": str(tmp_path), "max_pulled_mb": value})
