"""Deliveries of large messages go out in responses a default gRPC client can read (at most
4 MiB of messages each, or one message): a Receive of many large messages returns what fits and
gives the rest back for the next call; a Consume batch is split over several responses. Before,
such a batch failed with RESOURCE_EXHAUSTED every time and the group was stuck."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import gateway_pb2, gateway_pb2_grpc

BODY = 1_500_000  # two fit in 4 MiB, three do not


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(tmp_path / "data") as running:
        yield running


async def publish(stub: gateway_pb2_grpc.GatewayStub, topic: str, n: int) -> list[bytes]:
    bodies = [bytes([i]) * BODY for i in range(n)]
    for body in bodies:  # one per call: a request is at most 4 MiB for a default client too
        await stub.Publish(gateway_pb2.PublishRequest(
            topic=topic, messages=[gateway_pb2.Message(body=body)]))
    return bodies


async def test_receive_returns_what_fits_and_the_rest_comes_next(app: GatewayApp) -> None:
    topic = f"big-{uuid.uuid4().hex[:8]}"
    # A client with gRPC's default limits (4 MiB received per message).
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        bodies = await publish(stub, topic, 7)
        got: list[bytes] = []
        sizes: list[int] = []
        for _ in range(10):
            reply = await stub.Receive(gateway_pb2.ReceiveRequest(
                topic=topic, group="g", policy="rocketmq-simple", max_messages=7,
                wait_ms=2000, invisible_ms=60_000))
            sizes.append(len(reply.deliveries))
            for d in reply.deliveries:
                got.append(d.body)
                settled = await stub.Settle(gateway_pb2.SettleRequest(settlements=[
                    gateway_pb2.Settlement(receipt=d.receipt, ack=gateway_pb2.Ack())]))
                assert settled.results[0].ok
            if len(got) == len(bodies):
                break
        assert sorted(got) == sorted(bodies)
        assert max(sizes) == 2, sizes


async def test_a_consume_batch_is_split_over_responses(app: GatewayApp) -> None:
    topic = f"big-{uuid.uuid4().hex[:8]}"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        bodies = await publish(stub, topic, 7)

        acks: list[str] = []
        more = asyncio.Event()

        async def requests():  # type: ignore[no-untyped-def]
            yield gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
                topic=topic, group="g", policy="rocketmq", prefetch=7))
            while True:  # acks for what arrived, as it arrives
                await more.wait()
                more.clear()
                batch, acks[:] = list(acks), []
                yield gateway_pb2.ConsumeRequest(settle=gateway_pb2.SettleBatch(acks=batch))

        call = stub.Consume(requests())
        got: list[bytes] = []
        per_response: list[int] = []
        try:
            async for response in call:
                if response.WhichOneof("kind") != "deliveries":
                    continue
                per_response.append(len(response.deliveries.deliveries))
                for d in response.deliveries.deliveries:
                    got.append(d.body)
                    acks.append(d.receipt)
                more.set()
                if len(got) == len(bodies):
                    break
        finally:
            call.cancel()
        assert sorted(got) == sorted(bodies)
        assert max(per_response) <= 2, per_response


async def test_a_consumer_that_does_not_read_holds_only_its_byte_limit(tmp_path: Path) -> None:
    """A push consumer with all the credit it may have that never reads its stream: the
    gateway hands it --max-unacked-mb of bodies (the last delivery passes it), not the whole
    backlog; another consumer of the group gets the rest."""
    topic = f"big-{uuid.uuid4().hex[:8]}"
    async with (
        running_gateway(tmp_path / "data", max_unacked_mb=4) as app,
        grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel,
    ):
        stub = gateway_pb2_grpc.GatewayStub(channel)
        await publish(stub, topic, 20)  # 30 MB

        async def frames(first: gateway_pb2.ConsumeRequest) -> AsyncIterator[
                gateway_pb2.ConsumeRequest]:
            yield first
            await asyncio.Event().wait()  # sends nothing more, settles nothing

        stuck = stub.Consume(frames(gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
            topic=topic, group="g", policy="rocketmq", prefetch=100_000))))
        assert (await stuck.read()).WhichOneof("kind") == "subscribed"  # then reads nothing
        for _ in range(100):
            await asyncio.sleep(0.02)
            held = app.engine.unsettled(topic, "g")
            if len(held) >= 3:
                break
        await asyncio.sleep(0.3)
        assert len(app.engine.unsettled(topic, "g")) == 3  # 4.5 MB: the third passes 4 MiB
        other = stub.Consume(frames(gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
            topic=topic, group="g", policy="rocketmq", prefetch=2))))
        assert (await other.read()).WhichOneof("kind") == "subscribed"
        got = await other.read()
        assert got.WhichOneof("kind") == "deliveries"
        stuck.cancel()
        other.cancel()
