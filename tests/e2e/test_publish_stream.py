"""PublishStream: publishes pipelined on one stream, each answered in order with its ids or its
own error; the stream goes on after a refused request, and a result means durable."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.client import GatewayClient
from gateway.client_errors import InvalidArgumentError, ResourceExhaustedError
from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import gateway_pb2
from tests.e2e.test_gateway_crash import start_gateway

LIMIT = 64 * 1024


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(tmp_path / "data", max_message_bytes=LIMIT) as running:
        yield running


@pytest.fixture
async def client(app: GatewayApp) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as c:
        yield c


def topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def request(n: int, t: str, *bodies: bytes, **fields: object) -> gateway_pb2.PublishStreamRequest:
    return gateway_pb2.PublishStreamRequest(request_id=n, publish=gateway_pb2.PublishRequest(
        topic=t, messages=[gateway_pb2.Message(body=b, **fields) for b in bodies]))


async def bodies_of(client: GatewayClient, t: str, count: int) -> list[bytes]:
    got: list[bytes] = []
    async with client.consume(t, "g", policy="rocketmq", prefetch=count) as stream:
        while len(got) < count:
            msg = await stream.next(10)
            assert msg is not None, got
            got.append(msg.body)
            msg.ack_quietly()
        await stream.drain()
    return got


async def test_pipelined_publishes_are_answered_in_order_and_stored_in_order(
    client: GatewayClient,
) -> None:
    t = topic()
    async with client.publisher() as publisher:
        ids = await asyncio.gather(*(publisher.publish(t, [f"{i}-{j}".encode() for j in range(3)])
                                     for i in range(60)))
    assert [len(batch) for batch in ids] == [3] * 60
    assert len({i for batch in ids for i in batch}) == 180
    # Requests start in arrival order: on the embedded store their messages keep it.
    assert await bodies_of(client, t, 180) == [f"{i}-{j}".encode() for i in range(60)
                                               for j in range(3)]


async def test_a_refused_request_gets_its_own_error_and_the_stream_goes_on(
    client: GatewayClient,
) -> None:
    t = topic()
    requests = [
        request(7, t, b"first"),
        request(8, "", b"no topic"),
        request(9, t, b"x" * (LIMIT + 1)),
        request(10, t, b"late", delay_ms=-5),
        request(11, t, b"props", properties={"x-gateway-attempt": "1"}),
        gateway_pb2.PublishStreamRequest(request_id=12),  # no publish at all
        request(13, t, b"last"),
    ]
    answers = [a async for a in client.stub.PublishStream(iter(requests))]
    assert [a.request_id for a in answers] == [7, 8, 9, 10, 11, 12, 13]
    codes = [a.error_code for a in answers]
    assert codes == ["", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "INVALID_ARGUMENT",
                     "INVALID_ARGUMENT", "INVALID_ARGUMENT", ""]
    assert "topic" in answers[1].error
    assert "messages[0].delay_ms" in answers[3].error and "34560000000" in answers[3].error
    assert all(len(a.message_ids) == (0 if a.error_code else 1) for a in answers)
    assert await bodies_of(client, t, 2) == [b"first", b"last"]


async def test_the_client_raises_the_typed_error_a_publish_call_would(
    client: GatewayClient,
) -> None:
    t = topic()
    async with client.publisher() as publisher:
        with pytest.raises(InvalidArgumentError) as unary:
            await client.publish(t, [b"m"], delay_ms=-1)
        with pytest.raises(InvalidArgumentError) as streamed:
            await publisher.publish(t, [b"m"], delay_ms=-1)
        assert streamed.value.details() == unary.value.details()
        assert streamed.value.field_violations == unary.value.field_violations
        assert streamed.value.reason == unary.value.reason
        with pytest.raises(ResourceExhaustedError) as big:
            await publisher.publish(t, [b"x" * (LIMIT + 1)])
        assert big.value.metadata.get("limit") == str(LIMIT)
        assert len(await publisher.publish(t, [b"still open"])) == 1


async def test_bytes_that_are_no_request_end_the_stream_after_the_answers_before(
    app: GatewayApp,
) -> None:
    """The requests before the bad frame were stored: their answers (their ids) reach the
    client before the stream ends, however fast the frames came."""
    t = topic()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        call = channel.stream_stream("/gateway.v1.Gateway/PublishStream",
                                     request_serializer=lambda raw: raw,
                                     response_deserializer=gateway_pb2.PublishResult.FromString)
        good = [request(i, t, b"ok%d" % i).SerializeToString() for i in (1, 2, 3, 4)]
        for _ in range(5):
            answers: list[gateway_pb2.PublishResult] = []
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for answer in call(iter([*good[:3], b"\xff\xff\xff\xff", good[3]])):
                    answers.append(answer)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "request" in (err.value.details() or "")
            assert [(a.request_id, len(a.message_ids)) for a in answers] == [(1, 1), (2, 1),
                                                                              (3, 1)]
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
        assert await bodies_of(client, t, 15) == [b"ok1", b"ok2", b"ok3"] * 5
        assert len(await client.publish(t, [b"after"])) == 1


async def test_a_client_that_stops_reading_harms_no_one(app: GatewayApp) -> None:
    """A stream whose client never reads its answers holds back itself, not others."""
    target = f"127.0.0.1:{app.grpc_port}"

    async def endless() -> AsyncIterator[gateway_pb2.PublishStreamRequest]:
        n = 0
        while True:
            n += 1
            yield request(n, "stuck", b"x" * 4096)

    async with GatewayClient(target) as first, GatewayClient(target) as second:
        call = first.stub.PublishStream(endless())
        await asyncio.sleep(1.0)  # it writes as fast as it can and reads nothing
        t = topic()
        async with second.publisher() as publisher:
            for _ in range(20):
                assert len(await publisher.publish(t, [b"m"] * 10)) == 10
        call.cancel()


async def test_a_result_means_durable_after_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc, target = start_gateway(data)
    stored: list[str] = []
    try:
        async with GatewayClient(target) as client:
            publisher = client.publisher()
            async with publisher:

                async def one(i: int) -> None:
                    stored.extend(await publisher.publish("crash", [f"m{i}".encode()] * 5))

                tasks = [asyncio.ensure_future(one(i)) for i in range(2000)]
                while len(stored) < 500:
                    await asyncio.sleep(0.001)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            assert any(isinstance(o, Exception) for o in outcomes)
            assert publisher.failure is not None
    finally:
        if proc.poll() is None:
            proc.kill()
    answered = set(stored)
    proc, target = start_gateway(data)
    try:
        async with (
            GatewayClient(target) as client,
            client.consume("crash", "g", policy="rocketmq", prefetch=5000) as stream,
        ):
            seen: set[str] = set()
            while not answered <= seen:
                msg = await stream.next(10)
                assert msg is not None, f"{len(answered - seen)} answered ids never came"
                seen.add(msg.message_id)
                msg.ack_quietly()
    finally:
        proc.terminate()
        proc.wait(15)


async def test_a_forbidden_topic_ends_the_stream_after_the_answers_before_it(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[[principal]]\nname = "app"\ntoken = "app-secret"\npublish = ["orders"]\n'
                      'consume = ["orders"]\ngroups = ["g"]\n')
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens)) as running:
        target = f"127.0.0.1:{running.grpc_port}"
        async with GatewayClient(target, token="app-secret") as client:
            requests = [request(1, "orders", b"a"), request(2, "orders", b"b"),
                        request(3, "payments", b"c"), request(4, "orders", b"d")]
            answers: list[gateway_pb2.PublishResult] = []
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for answer in client.stub.PublishStream(iter(requests),
                                                              metadata=client.metadata):
                    answers.append(answer)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert [(a.request_id, len(a.message_ids)) for a in answers] == [(1, 1), (2, 1)]
            assert await bodies_of(client, "orders", 2) == [b"a", b"b"]
        async with GatewayClient(target, token="wrong") as stranger:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async with stranger.publisher() as publisher:
                    await publisher.publish("orders", [b"x"])
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
