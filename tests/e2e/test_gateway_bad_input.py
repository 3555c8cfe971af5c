"""Bad input gets a clear status and message, changes nothing, and the server keeps serving."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.client import GatewayClient
from gateway.limits import MAX_CREDIT
from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import admin_pb2, gateway_pb2

INVALID = grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(tmp_path / "data", max_message_bytes=64 * 1024) as running:
        yield running


@pytest.fixture
async def client(app: GatewayApp) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as c:
        yield c


def topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def expect(code: grpc.StatusCode, call: object, *words: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    assert err.value.code() == code, err.value
    for word in words:
        assert word in err.value.details(), err.value.details()


def receive(t: str, **kw: object) -> gateway_pb2.ReceiveRequest:
    base: dict[str, object] = {"topic": t, "group": "g", "policy": "rocketmq-simple",
                               "max_messages": 1, "invisible_ms": 10_000}
    base.update(kw)
    return gateway_pb2.ReceiveRequest(**base)  # type: ignore[arg-type]


async def test_unknown_policy(client: GatewayClient) -> None:
    await expect(INVALID, client.stub.Receive(receive(topic(), policy="kafka")),
                 "policy", "rocketmq")


@pytest.mark.parametrize(
    ("policy", "options", "words"),
    [
        ("rocketmq-orderly", {"suspend_ms": "5"}, ("suspend_ms", "10..30000")),
        ("rabbitmq", {"x_retry_interval_s": "5"}, ("x_retry_interval_s", "10..1800")),
        ("rabbitmq", {"x_retry_interval_s": "1801"}, ("x_retry_interval_s", "10..1800")),
        ("rocketmq", {"max_retries": "1001"}, ("max_retries", "0..1000")),
        ("rocketmq", {"colour": "blue"}, ("colour",)),
    ],
)
async def test_bad_policy_options(
    client: GatewayClient, policy: str, options: dict[str, str], words: tuple[str, ...]
) -> None:
    request = receive(topic(), policy=policy, invisible_ms=0, policy_options=options)
    await expect(INVALID, client.stub.Receive(request), *words)


async def test_bad_invisible_duration(client: GatewayClient) -> None:
    t = topic()
    await client.publish(t, [b"x"])
    await expect(INVALID, client.stub.Receive(receive(t, invisible_ms=5000)),
                 "invisible_ms", "10000..43200000")
    # Nothing changed: the message is still there for a valid receive.
    got = await client.stub.Receive(receive(t))
    assert len(got.deliveries) == 1 and got.deliveries[0].attempt == 1


async def test_out_of_range_delay_changes_nothing(client: GatewayClient) -> None:
    t = topic()
    await client.publish(t, [b"x"])
    msgs = await client.receive(t, "g", policy="pulsar-nack", max_messages=1,
                                options={"nack_delay_ms": "1000"}, wait_ms=1000)
    assert len(msgs) == 1
    receipt = msgs[0].delivery.receipt
    # A pulsar retry-letter delay of 0 s or 864001 s is out of range.
    msgs2 = await client.receive(t + "r", "g", policy="pulsar", max_messages=1)
    assert msgs2 == []
    await client.publish(t + "r", [b"y"])
    msgs2 = await client.receive(t + "r", "g", policy="pulsar", max_messages=1, wait_ms=1000)
    for bad in (0, 864_001_000):
        settle = gateway_pb2.SettleRequest(settlements=[gateway_pb2.Settlement(
            receipt=msgs2[0].delivery.receipt, fail=gateway_pb2.Fail(delay_ms=bad))])
        await expect(INVALID, client.stub.Settle(settle), "delay_ms", "1000..864000000")
    level = gateway_pb2.SettleRequest(settlements=[gateway_pb2.Settlement(
        receipt=msgs2[0].delivery.receipt, fail=gateway_pb2.Fail(delay_level=19))])
    await expect(INVALID, client.stub.Settle(level), "delay_level", "1..18")
    # The delivery is untouched: it can still be acked, once.
    assert (await msgs2[0].ack()).ok
    assert (await msgs[0].ack()).ok
    stale = gateway_pb2.SettleRequest(settlements=[gateway_pb2.Settlement(
        receipt=receipt, ack=gateway_pb2.Ack())])
    await expect(grpc.StatusCode.FAILED_PRECONDITION, client.stub.Settle(stale), receipt)


async def test_unknown_and_repeated_receipts(client: GatewayClient) -> None:
    t = topic()
    await client.publish(t, [b"x"])
    got = await client.stub.Receive(receive(t))
    receipt = got.deliveries[0].receipt
    twice = gateway_pb2.SettleRequest(settlements=[
        gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack()),
        gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack()),
    ])
    await expect(grpc.StatusCode.FAILED_PRECONDITION, client.stub.Settle(twice), receipt)
    unknown = gateway_pb2.SettleRequest(settlements=[
        gateway_pb2.Settlement(receipt="nope", ack=gateway_pb2.Ack())])
    await expect(grpc.StatusCode.FAILED_PRECONDITION, client.stub.Settle(unknown), "nope")
    # The batch with the repeat changed nothing: one ack still works.
    once = gateway_pb2.SettleRequest(settlements=[
        gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack())])
    assert (await client.stub.Settle(once)).results[0].ok


async def test_oversized_message(client: GatewayClient) -> None:
    t = topic()
    await expect(grpc.StatusCode.RESOURCE_EXHAUSTED,
                 client.stub.Publish(gateway_pb2.PublishRequest(
                     topic=t, messages=[gateway_pb2.Message(body=b"x" * 70_000)])),
                 "65536")
    assert (await client.stub.Receive(receive(t))).deliveries == []


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (gateway_pb2.PublishRequest(topic="", messages=[gateway_pb2.Message(body=b"x")]),
         ("topic",)),
        (gateway_pb2.PublishRequest(topic="t"), ("messages",)),
        (gateway_pb2.PublishRequest(topic="t", messages=[
            gateway_pb2.Message(body=b"x", delay_ms=5, deliver_at_ms=5)]), ("delay_ms",)),
        # Reserved names would let a publisher forge what the engine writes on its copies (the
        # origin topic decides where a dead letter goes).
        (gateway_pb2.PublishRequest(topic="t", messages=[gateway_pb2.Message(
            body=b"x", properties={"x-gateway-origin-topic": "victim"})]),
         ("properties", "x-gateway-")),
    ],
)
async def test_bad_publish(client: GatewayClient, request_: object, words: tuple[str, ...]) -> None:
    await expect(INVALID, client.stub.Publish(request_), *words)


async def test_missing_fields(client: GatewayClient) -> None:
    await expect(INVALID, client.stub.Receive(receive("")), "topic")
    await expect(INVALID, client.stub.Receive(receive("t", group="")), "group")
    await expect(INVALID, client.stub.Receive(receive("t", policy="")), "policy")
    await expect(INVALID, client.stub.Settle(gateway_pb2.SettleRequest()), "settlements")
    await expect(INVALID, client.stub.Settle(gateway_pb2.SettleRequest(settlements=[
        gateway_pb2.Settlement(receipt="r")])), "action")
    await expect(INVALID, client.admin.DescribeGroup(
        admin_pb2.DescribeGroupRequest(topic="t")), "group")


async def test_consume_stream_must_subscribe_first(client: GatewayClient) -> None:
    async def requests():  # type: ignore[no-untyped-def]
        yield gateway_pb2.ConsumeRequest(credit=gateway_pb2.Credit(messages=1))

    call = client.stub.Consume(requests())
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in call:
            pass
    assert err.value.code() == INVALID and "subscribe" in err.value.details()


async def test_server_keeps_serving_after_errors(client: GatewayClient) -> None:
    for _ in range(3):
        with pytest.raises(grpc.aio.AioRpcError):
            await client.stub.Receive(receive("", policy="nope"))
    t = topic()
    assert len(await client.publish(t, [b"ok"])) == 1


@pytest.mark.parametrize(
    ("settle_credit", "bad_frames"),
    [(0, [b"\xff\xff\xff"]),  # does not decode
     (0, [gateway_pb2.ConsumeRequest(credit=gateway_pb2.Credit(messages=0)).SerializeToString()]),
     (MAX_CREDIT, [])],  # the batch's own credit is refused: too much unused credit in all
    ids=["undecodable", "zero-credit", "settle-credit-refused"])
async def test_a_settle_batch_is_answered_before_a_bad_frame_ends_the_stream(
    app: GatewayApp, settle_credit: int, bad_frames: list[bytes],
) -> None:
    """The frame right behind a settle batch (or the batch's own credit) ends the stream
    INVALID_ARGUMENT, but only after the batch's answer (its acks were applied: the client must
    learn it), however fast the frames came."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        consume = channel.stream_stream(
            "/gateway.v1.Gateway/Consume", request_serializer=lambda raw: raw,
            response_deserializer=gateway_pb2.ConsumeResponse.FromString)
        for _ in range(5):
            t = topic()
            async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
                await client.publish(t, [b"m%d" % i for i in range(5)])
            receipts: asyncio.Queue[list[str]] = asyncio.Queue()
            kinds: list[str] = []
            delivered: list[str] = []
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for response in consume(
                        settle_then(t, receipts, settle_credit, bad_frames)):
                    kind = response.WhichOneof("kind")
                    kinds.append(f"acked={response.results.acked}" if kind == "results"
                                 else kind)
                    if kind == "deliveries":
                        delivered += [d.receipt for d in response.deliveries.deliveries]
                        if len(delivered) == 5:
                            receipts.put_nowait(delivered)
            assert err.value.code() == INVALID, err.value
            assert kinds[0] == "subscribed" and kinds[-1] == "acked=5", kinds
            assert set(kinds[1:-1]) == {"deliveries"}, kinds
            # The acks were applied: nothing is left to receive.
            assert (await receive_all(app, t)) == 0


async def settle_then(
    t: str, receipts: asyncio.Queue[list[str]], credit: int, frames: list[bytes]
) -> AsyncIterator[bytes]:
    """Subscribe to `t`, ack the receipts once they come, with `credit`, then `frames`."""
    yield gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
        topic=t, group="g", policy="rocketmq", prefetch=10)).SerializeToString()
    acks = await receipts.get()
    yield gateway_pb2.ConsumeRequest(settle=gateway_pb2.SettleBatch(
        acks=acks, credit=credit)).SerializeToString()
    for frame in frames:
        yield frame


async def receive_all(app: GatewayApp, t: str) -> int:
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
        got = await client.stub.Receive(receive(t, policy="rocketmq", max_messages=100,
                                                invisible_ms=0))
    return len(got.deliveries)


async def subscribed(client: GatewayClient, **fields: object) -> tuple[object, object]:
    """Open a Consume stream with a Subscribe of `fields`: (the call, its first answer)."""
    subscribe = gateway_pb2.Subscribe(**{"topic": "t-agree", "group": "g", "prefetch": 1,
                                         **fields})  # type: ignore[arg-type]

    async def requests():  # type: ignore[no-untyped-def]
        yield gateway_pb2.ConsumeRequest(subscribe=subscribe)
        await asyncio.sleep(30)

    call = client.stub.Consume(requests())
    return call, await call.read()


@pytest.mark.parametrize(("fields", "words"), [
    ({"policy": "rocketmq", "broadcast": True, "consumer_id": "c",
      "policy_options": {"broadcast": "false"}},
     ("policy_options['broadcast']", "the request's broadcast is true")),
    ({"policy": "pulsar", "consumer_type": gateway_pb2.CONSUMER_TYPE_EXCLUSIVE,
      "policy_options": {"subscription_type": "shared"}},
     ("policy_options['subscription_type']", "exclusive or left out", "CONSUMER_TYPE_EXCLUSIVE")),
])
async def test_an_option_that_contradicts_its_field_is_refused(
    client: GatewayClient, fields: dict[str, object], words: tuple[str, ...],
) -> None:
    # Before, one of the two won without a word (a broadcast consumer that did not broadcast).
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await subscribed(client, **fields)
    assert err.value.code() == INVALID
    for word in words:
        assert word in err.value.details(), err.value.details()


async def test_a_pull_receive_that_asks_to_broadcast_is_refused(client: GatewayClient) -> None:
    request = receive(topic(), policy="rocketmq", invisible_ms=0,
                      policy_options={"broadcast": "true"})
    await expect(INVALID, client.stub.Receive(request), "policy_options['broadcast']",
                 "a pull receive does not broadcast")


async def test_the_subscription_type_option_alone_sets_the_consumer_type(
    client: GatewayClient,
) -> None:
    options = {"subscription_type": "exclusive"}
    first, answer = await subscribed(client, policy="pulsar", policy_options=options)
    assert answer.WhichOneof("kind") == "subscribed"  # type: ignore[attr-defined]
    with pytest.raises(grpc.aio.AioRpcError) as err:  # held to it, as the policy runs
        await subscribed(client, policy="pulsar", policy_options=options)
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    first.cancel()  # type: ignore[attr-defined]
