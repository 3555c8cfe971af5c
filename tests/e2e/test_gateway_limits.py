"""Issue 16 at the gRPC edge: every value range-checked before the engine sees it, undecodable
requests refused as INVALID_ARGUMENT, echoed values cut short, sizes counting every part."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.client import GatewayClient
from gateway.limits import MAX_DELAY_MS, MAX_PUBLISH_PROPERTIES
from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import admin_pb2, gateway_pb2

INVALID = grpc.StatusCode.INVALID_ARGUMENT
LIMIT = 64 * 1024
DAY_MS = 86_400_000


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


async def expect(code: grpc.StatusCode, call: object, *words: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    assert err.value.code() == code, err.value
    for word in words:
        assert word in err.value.details(), err.value.details()
    return err.value.details() or ""


def publish(t: str, **message: object) -> gateway_pb2.PublishRequest:
    return gateway_pb2.PublishRequest(topic=t, messages=[gateway_pb2.Message(**message)])


async def topics(client: GatewayClient) -> list[str]:
    return list((await client.admin.ListTopics(admin_pb2.ListTopicsRequest())).topics)


# ------------------------------------------------------------------ defect 1: deliver_at_ms


async def test_deliver_at_is_capped_like_delay(client: GatewayClient) -> None:
    t = topic()
    now = int(time.time() * 1000)
    for bad in (2**63 - 1, 2**62, now + MAX_DELAY_MS + DAY_MS):
        await expect(INVALID, client.stub.Publish(publish(t, body=b"x", deliver_at_ms=bad)),
                     "messages[0].deliver_at_ms", "400 days")
    await expect(INVALID, client.stub.Publish(publish(t, body=b"x", deliver_at_ms=-1)),
                 "deliver_at_ms")
    await expect(INVALID, client.stub.Publish(publish(t, body=b"x", delay_ms=MAX_DELAY_MS + 1)),
                 "delay_ms", str(MAX_DELAY_MS))
    assert t not in await topics(client)  # nothing stored
    ok = await client.stub.Publish(publish(t, body=b"x", deliver_at_ms=now + MAX_DELAY_MS - DAY_MS))
    assert len(ok.message_ids) == 1
    past = await client.stub.Publish(publish(t, body=b"y", deliver_at_ms=1))
    assert len(past.message_ids) == 1


# ------------------------------------------------------------ defect 7: sizes count every part


@pytest.mark.parametrize(
    "message",
    [
        {"body": b"x", "key": "k" * (LIMIT + 1)},
        {"body": b"x", "tag": "t" * (LIMIT + 1)},
        {"body": b"x" * (LIMIT - 10), "key": "k" * 20},
        {"body": b"x" * (LIMIT - 10), "properties": {"p": "v" * 20}},
        {"body": b"x", "properties": {"k" * (LIMIT // 2): "v" * (LIMIT // 2)}},
        {"body": b"x", "key": "\u00e9" * (LIMIT // 2 + 1)},  # 2 bytes of UTF-8 each
    ],
)
async def test_message_size_counts_key_tag_and_properties(
    client: GatewayClient, message: dict[str, object]
) -> None:
    t = topic()
    await expect(grpc.StatusCode.RESOURCE_EXHAUSTED, client.stub.Publish(publish(t, **message)),
                 str(LIMIT))
    assert t not in await topics(client)


async def test_batch_limit(client: GatewayClient) -> None:
    request = gateway_pb2.PublishRequest(
        topic=topic(), messages=[gateway_pb2.Message() for _ in range(10_001)])
    await expect(INVALID, client.stub.Publish(request), "messages", "10000")


async def test_properties_of_one_publish_are_capped(client: GatewayClient) -> None:
    """At most MAX_PUBLISH_PROPERTIES in one publish, all messages together: each costs the
    gateway's event loop microseconds, and 7,000 messages of 1,024 held it for 12 s."""
    props = {f"p{i}": "" for i in range(1024)}
    over = MAX_PUBLISH_PROPERTIES // 1024 + 1
    request = gateway_pb2.PublishRequest(
        topic=topic(), messages=[gateway_pb2.Message(properties=props)] * over)
    await expect(INVALID, client.stub.Publish(request), "messages",
                 f"{over * 1024} properties", str(MAX_PUBLISH_PROPERTIES))
    request = gateway_pb2.PublishRequest(
        topic=topic(), messages=[gateway_pb2.Message(properties=props)] * (over - 1))
    assert len((await client.stub.Publish(request)).message_ids) == over - 1


# ------------------------------------------------------------ defect 9: undecodable requests

METHODS = [
    "/gateway.v1.Gateway/Publish",
    "/gateway.v1.Gateway/Receive",
    "/gateway.v1.Gateway/Settle",
    "/gateway.v1.Admin/DescribeGroup",
    "/gateway.v1.Admin/ListDeadLetters",
    "/gateway.v1.Admin/ResendDeadLetters",
    "/gateway.v1.Admin/Purge",
    "/gateway.v1.Admin/ListTopics",
]
GARBAGE = [b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x0a\x02\xc3\x28"]  # junk, truncated, bad UTF-8


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("garbage", GARBAGE)
async def test_undecodable_unary_request(
    client: GatewayClient, method: str, garbage: bytes
) -> None:
    if method.endswith("ListTopics") and garbage == GARBAGE[2]:
        garbage = b"\xff"  # ListTopicsRequest has no string field
    call = client.channel.unary_unary(method)(garbage)
    details = await expect(INVALID, call, "request")
    assert len(details) < 400


def consume(method_frames: list[bytes], client: GatewayClient) -> object:
    async def frames() -> AsyncIterator[bytes]:
        for frame in method_frames:
            yield frame

    return client.channel.stream_stream("/gateway.v1.Gateway/Consume")(frames())


def subscribe_frame(t: str) -> bytes:
    return gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
        topic=t, group="g", policy="rocketmq")).SerializeToString()


async def stream_status(call: object) -> tuple[grpc.StatusCode, str, int]:
    got = 0
    try:
        async for _ in call:  # type: ignore[attr-defined]
            got += 1
    except grpc.aio.AioRpcError as err:
        return err.code(), err.details() or "", got
    return grpc.StatusCode.OK, "", got


@pytest.mark.parametrize("garbage", GARBAGE)
async def test_garbage_first_consume_frame(client: GatewayClient, garbage: bytes) -> None:
    code, details, _ = await stream_status(consume([garbage], client))
    assert code == INVALID and "request" in details, (code, details)


@pytest.mark.parametrize("garbage", GARBAGE)
async def test_garbage_after_subscribe(client: GatewayClient, garbage: bytes) -> None:
    code, details, _ = await stream_status(consume([subscribe_frame(topic()), garbage], client))
    assert code == INVALID and "request" in details, (code, details)


@pytest.mark.parametrize("token", ["99999999999999999999999", "9223372036854775807",
                                   "9007199254740992", "-5", "abc",
                                   " 1", "1_0", "\u0663"])
async def test_page_tokens_are_checked(client: GatewayClient, token: str) -> None:
    request = admin_pb2.ListDeadLettersRequest(topic="t", group="g", page_token=token)
    await expect(INVALID, client.admin.ListDeadLetters(request), "page_token")


async def test_the_largest_page_token_is_an_empty_page(client: GatewayClient) -> None:
    request = admin_pb2.ListDeadLettersRequest(topic="t", group="g",
                                               page_token=str(2**53 - 1))
    page = await client.admin.ListDeadLetters(request)
    assert list(page.dead_letters) == [] and page.next_page_token == ""


# ----------------------------------------------------------- defect 10: echoed values, names

LONG = "x" * (100 * 1024)


async def test_huge_names_give_a_short_invalid_argument(client: GatewayClient) -> None:
    calls = [
        client.stub.Publish(publish(LONG, body=b"x")),
        client.stub.Receive(gateway_pb2.ReceiveRequest(topic=LONG, group="g", policy="rocketmq",
                                                       max_messages=1)),
        client.stub.Receive(gateway_pb2.ReceiveRequest(topic="t", group=LONG, policy="rocketmq",
                                                       max_messages=1)),
        client.stub.Receive(gateway_pb2.ReceiveRequest(topic="t", group="g", policy=LONG,
                                                       max_messages=1)),
        client.stub.Receive(gateway_pb2.ReceiveRequest(
            topic="t", group="g", policy="rocketmq", max_messages=1,
            policy_options={"max_retries": LONG})),
        client.stub.Receive(gateway_pb2.ReceiveRequest(
            topic="t", group="g", policy="rocketmq", max_messages=1,
            policy_options={LONG: "1"})),
        client.admin.DescribeGroup(admin_pb2.DescribeGroupRequest(topic=LONG, group="g")),
        client.stub.Settle(gateway_pb2.SettleRequest(settlements=[
            gateway_pb2.Settlement(receipt=LONG, ack=gateway_pb2.Ack())])),
    ]
    for call in calls:
        details = await expect(INVALID, call)
        assert len(details) < 600, len(details)


async def test_name_limit_is_255_bytes(client: GatewayClient) -> None:
    await expect(INVALID, client.stub.Publish(publish("a" * 256, body=b"x")), "topic", "255")
    await expect(INVALID, client.stub.Publish(publish("\u00e9" * 128, body=b"x")), "255")
    assert len((await client.stub.Publish(publish("a" * 255, body=b"x"))).message_ids) == 1


# -------------------------------------------------------------------- defect 11: smaller gaps


async def test_empty_property_key(client: GatewayClient) -> None:
    t = topic()
    await expect(INVALID, client.stub.Publish(publish(t, body=b"x", properties={"": "v"})),
                 "properties")
    assert t not in await topics(client)


async def test_credit_zero_is_refused(client: GatewayClient) -> None:
    frames = [subscribe_frame(topic()),
              gateway_pb2.ConsumeRequest(credit=gateway_pb2.Credit()).SerializeToString()]
    code, details, _ = await stream_status(consume(frames, client))
    assert code == INVALID and "credit" in details, (code, details)


async def test_second_subscribe_is_refused(client: GatewayClient) -> None:
    t = topic()
    code, details, _ = await stream_status(consume([subscribe_frame(t), subscribe_frame(t)],
                                                   client))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "subscribe" in details, (code, details)


async def test_invisible_zero_means_the_policy_default(client: GatewayClient) -> None:
    t = topic()
    await client.publish(t, [b"x"])
    before = int(time.time() * 1000)
    got = await client.stub.Receive(gateway_pb2.ReceiveRequest(
        topic=t, group="g", policy="rocketmq-simple", max_messages=1, invisible_ms=0))
    assert len(got.deliveries) == 1
    deadline = got.deliveries[0].deadline_ms
    assert before + 10_000 <= deadline <= before + 43_200_000 + 60_000


async def test_max_messages_zero_is_refused(client: GatewayClient) -> None:
    request = gateway_pb2.ReceiveRequest(topic=topic(), group="g", policy="rocketmq",
                                         max_messages=0)
    await expect(INVALID, client.stub.Receive(request), "max_messages", "1..10000")


async def test_settle_is_all_or_nothing(client: GatewayClient) -> None:
    t = topic()
    await client.publish(t, [b"x"])
    got = await client.stub.Receive(gateway_pb2.ReceiveRequest(
        topic=t, group="g", policy="rocketmq-simple", max_messages=1, invisible_ms=10_000))
    receipt = got.deliveries[0].receipt
    mixed = gateway_pb2.SettleRequest(settlements=[
        gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack()),
        gateway_pb2.Settlement(receipt="unknown", ack=gateway_pb2.Ack())])
    await expect(grpc.StatusCode.FAILED_PRECONDITION, client.stub.Settle(mixed), "unknown")
    once = gateway_pb2.SettleRequest(settlements=[
        gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack())])
    assert (await client.stub.Settle(once)).results[0].ok  # the first was not applied


@pytest.mark.parametrize(
    ("settlement", "words"),
    [
        (gateway_pb2.Settlement(receipt="r", fail=gateway_pb2.Fail(delay_ms=-1)), "delay_ms"),
        (gateway_pb2.Settlement(receipt="r", fail=gateway_pb2.Fail(delay_ms=2**62)), "delay_ms"),
        (gateway_pb2.Settlement(receipt="r", fail=gateway_pb2.Fail(delay_level=0)),
         "delay_level"),
        (gateway_pb2.Settlement(receipt="r", fail=gateway_pb2.Fail(reason="r" * 5000)), "reason"),
        (gateway_pb2.Settlement(receipt="r", change_invisible=gateway_pb2.ChangeInvisible(
            invisible_ms=-5)), "invisible_ms"),
        (gateway_pb2.Settlement(receipt="r", dead_letter=gateway_pb2.DeadLetter(
            reason="r" * 5000)), "reason"),
    ],
)
async def test_settlement_values_checked_at_the_edge(
    client: GatewayClient, settlement: gateway_pb2.Settlement, words: str
) -> None:
    await expect(INVALID, client.stub.Settle(gateway_pb2.SettleRequest(
        settlements=[settlement])), words)


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (gateway_pb2.ReceiveRequest(topic="t", group="g", policy="rocketmq", max_messages=1,
                                    wait_ms=-1), ("wait_ms", "0..60000")),
        (gateway_pb2.ReceiveRequest(topic="t", group="g", policy="rocketmq-simple",
                                    max_messages=1, invisible_ms=-1), ("invisible_ms",)),
        (gateway_pb2.ReceiveRequest(topic="t", group="g", policy="rocketmq", max_messages=1,
                                    tag_filter="a" * 5000), ("tag_filter",)),
        (gateway_pb2.ReceiveRequest(topic="t", group="g", policy="rocketmq", max_messages=1,
                                    policy_options={str(i): "1" for i in range(100)}),
         ("policy_options",)),
    ],
)
async def test_receive_values_checked_at_the_edge(
    client: GatewayClient, request_: gateway_pb2.ReceiveRequest, words: tuple[str, ...]
) -> None:
    await expect(INVALID, client.stub.Receive(request_), *words)


async def test_admin_values_checked_at_the_edge(client: GatewayClient) -> None:
    await expect(INVALID, client.admin.ListDeadLetters(admin_pb2.ListDeadLettersRequest(
        topic="t", group="g", limit=1001)), "limit", "1000")
    await expect(INVALID, client.admin.ResendDeadLetters(admin_pb2.ResendDeadLettersRequest(
        topic="t", group="g", message_ids=["x" * 300])), "message_ids")
    await expect(INVALID, client.admin.Purge(admin_pb2.PurgeRequest(topic="t", group="")),
                 "group")


async def test_credit_is_capped(client: GatewayClient) -> None:
    full = gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
        topic=topic(), group="g", policy="rocketmq", prefetch=100_000)).SerializeToString()
    more = gateway_pb2.ConsumeRequest(credit=gateway_pb2.Credit(messages=1)).SerializeToString()
    code, details, _ = await stream_status(consume([full, more], client))
    assert code == INVALID and "credit" in details and "100000" in details, (code, details)
    over = gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
        topic=topic(), group="g", policy="rocketmq", prefetch=100_001)).SerializeToString()
    code, details, _ = await stream_status(consume([over], client))
    assert code == INVALID and "prefetch" in details, (code, details)


async def test_settle_batch_is_capped(client: GatewayClient) -> None:
    batch = gateway_pb2.ConsumeRequest(settle=gateway_pb2.SettleBatch(
        acks=["r"] * 10_001)).SerializeToString()
    code, details, _ = await stream_status(consume([subscribe_frame(topic()), batch], client))
    assert code == INVALID and "10000" in details, (code, details)


async def test_a_bad_settlement_in_a_stream_fails_only_its_result(client: GatewayClient) -> None:
    batch = gateway_pb2.ConsumeRequest(settle=gateway_pb2.SettleBatch(settlements=[
        gateway_pb2.Settlement(receipt="r", fail=gateway_pb2.Fail(delay_ms=-1)),
        gateway_pb2.Settlement(receipt="r2", ack=gateway_pb2.Ack())])).SerializeToString()
    frames = [subscribe_frame(topic()), batch]
    call = consume(frames, client)
    answers = [gateway_pb2.ConsumeResponse.FromString(raw)
               async for raw in call]  # type: ignore[attr-defined]
    results = next(a for a in answers if a.WhichOneof("kind") == "results").results.results
    assert [r.error_code for r in results] == ["INVALID_ARGUMENT", "FAILED_PRECONDITION"]


ALSO_SERVED = [
    ("/grpc.health.v1.Health/Check", "unary"),
    ("/grpc.health.v1.Health/Watch", "unary_stream"),
    ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "stream"),
]


@pytest.mark.parametrize(("method", "kind"), ALSO_SERVED)
async def test_undecodable_requests_to_health_and_reflection(
    client: GatewayClient, method: str, kind: str
) -> None:
    """The services beside the gateway's own answer bytes that are no request as it does:
    INVALID_ARGUMENT naming the request (grpc answered UNKNOWN and INTERNAL)."""
    garbage = b"\xff\xfe"
    if kind == "unary":
        call: object = client.channel.unary_unary(method)(garbage)
        await expect(INVALID, call, "request")
        return
    if kind == "unary_stream":
        call = client.channel.unary_stream(method)(garbage)
    else:
        call = client.channel.stream_stream(method)(iter([garbage]))
    code, details, _ = await stream_status(call)
    assert code == INVALID and "request" in details, (code, details)
