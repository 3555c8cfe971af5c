"""A refusal by a policy's own check (deeper than the edge's range checks) names the field by
its path in the request, as the edge does: the BadRequest field violation and the message say
`settlements[1].fail.delay_ms`, not `delay_ms`, with what the policy allows.

Over real gRPC calls: Consume (Subscribe, then a SettleBatch whose refused settlements carry
the path in their results), Receive, and the all-or-nothing Settle."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc
import pytest

from gateway.client_errors import GatewayRpcError, InvalidArgumentError, typed
from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import gateway_pb2 as pb
from gateway.v1 import gateway_pb2_grpc

SIMPLE_RANGE = "10000..43200000"
"""rocketmq-simple's invisible duration (receive and change_invisible)."""
PULSAR_DELAY = "1000..864000000"
"""pulsar's reconsumeLater delay."""


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(tmp_path / "data", max_message_bytes=64 * 1024) as running:
        yield running


@pytest.fixture
async def stub(app: GatewayApp) -> AsyncIterator[gateway_pb2_grpc.GatewayStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        yield gateway_pb2_grpc.GatewayStub(channel)


def topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def refused(call: object) -> GatewayRpcError:
    """The typed error of a unary call that fails with INVALID_ARGUMENT."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    error = typed(err.value)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert isinstance(error, InvalidArgumentError)
    return error


def assert_names(error: GatewayRpcError, field: str, *allowed: str) -> None:
    """`error` names `field` in its one field violation, its ErrorInfo and its message, and
    says what is allowed in its message and violation."""
    [violation] = error.field_violations
    assert violation.field == field, error
    assert error.metadata["field"] == field
    assert (error.details() or "").startswith(f"{field}="), error.details()
    for word in allowed:
        assert word in (error.details() or ""), error.details()
        assert word in violation.description, violation.description


async def subscribe_refused(
    stub: gateway_pb2_grpc.GatewayStub, sub: pb.Subscribe
) -> GatewayRpcError:
    """The error that ends a Consume stream opened with `sub`."""
    done = asyncio.Event()

    async def frames() -> AsyncIterator[pb.ConsumeRequest]:
        yield pb.ConsumeRequest(subscribe=sub)
        await done.wait()

    call = stub.Consume(frames(), timeout=30)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in call:
                pass
    finally:
        done.set()
        call.cancel()
    error = typed(err.value)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    return error


async def published(stub: gateway_pb2_grpc.GatewayStub, t: str, n: int) -> None:
    await stub.Publish(pb.PublishRequest(topic=t, messages=[pb.Message(body=b"x")] * n))


async def received(
    stub: gateway_pb2_grpc.GatewayStub, t: str, policy: str, n: int, **kw: object
) -> list[str]:
    """The receipts of `n` deliveries pulled from `t` under `policy`."""
    await published(stub, t, n)
    got: list[str] = []
    while len(got) < n:
        response = await stub.Receive(pb.ReceiveRequest(
            topic=t, group="g", policy=policy, max_messages=n - len(got), wait_ms=5000,
            **kw))  # type: ignore[arg-type]
        assert response.deliveries, "nothing delivered"
        got += [d.receipt for d in response.deliveries]
    return got


# ---------------------------------------------------------------------------- Subscribe


@pytest.mark.parametrize("policy", ["pulsar", "rocketmq-simple", "rabbitmq"])
async def test_broadcast_refused_names_broadcast(
    stub: gateway_pb2_grpc.GatewayStub, policy: str
) -> None:
    """The client set `broadcast`, no policy option: the violation is on `broadcast`, and says
    which policies have a broadcasting mode."""
    error = await subscribe_refused(stub, pb.Subscribe(
        topic=topic(), group="g", policy=policy, broadcast=True))
    assert_names(error, "broadcast", f"policy {policy} has no broadcasting mode", "rocketmq")
    assert "policy_options" not in (error.details() or "")


async def test_broadcast_where_the_policy_has_it(stub: gateway_pb2_grpc.GatewayStub) -> None:
    done = asyncio.Event()

    async def frames() -> AsyncIterator[pb.ConsumeRequest]:
        yield pb.ConsumeRequest(subscribe=pb.Subscribe(
            topic=topic(), group="g", policy="rocketmq", broadcast=True))
        await done.wait()

    call = stub.Consume(frames(), timeout=30)
    try:
        first = await call.read()
        assert first.subscribed.policy == "rocketmq"
        assert first.subscribed.retry_topic == ""  # broadcasting: failures are dropped
    finally:
        done.set()
        call.cancel()


async def test_bad_policy_option_names_its_key(stub: gateway_pb2_grpc.GatewayStub) -> None:
    """A policy names its option bare; the request sets it in `policy_options`."""
    options = {"max_retries": "1001"}
    error = await subscribe_refused(stub, pb.Subscribe(
        topic=topic(), group="g", policy="rocketmq", policy_options=options))
    assert_names(error, "policy_options['max_retries']", "0..1000")
    receive = pb.ReceiveRequest(topic=topic(), group="g", policy="rocketmq-orderly",
                                max_messages=1, policy_options={"suspend_ms": "5"})
    assert_names(await refused(stub.Receive(receive)), "policy_options['suspend_ms']",
                 "10..30000")


async def test_receive_invisible_duration_names_its_range(
    stub: gateway_pb2_grpc.GatewayStub,
) -> None:
    receive = pb.ReceiveRequest(topic=topic(), group="g", policy="rocketmq-simple",
                                max_messages=1, invisible_ms=9999)
    assert_names(await refused(stub.Receive(receive)), "invisible_ms", SIMPLE_RANGE)


# ------------------------------------------------------------------------- unary Settle


async def test_settle_names_the_refused_settlement(stub: gateway_pb2_grpc.GatewayStub) -> None:
    """Settle is all or nothing: the error names the index of the settlement the policy
    refused, and its field; nothing is applied."""
    t = topic()
    r = await received(stub, t, "rocketmq-simple", 3, invisible_ms=60_000)
    ok = pb.Settlement(receipt=r[0], change_invisible=pb.ChangeInvisible(invisible_ms=20_000))
    fail_now = pb.Settlement(receipt=r[1], fail=pb.Fail(delay_ms=0))
    too_long = pb.Settlement(receipt=r[2],
                             change_invisible=pb.ChangeInvisible(invisible_ms=43_200_001))
    level = pb.Settlement(receipt=r[1], fail=pb.Fail(delay_level=3))

    error = await refused(stub.Settle(pb.SettleRequest(settlements=[ok, fail_now])))
    assert_names(error, "settlements[1].fail.delay_ms", "unset", "invisible duration")
    error = await refused(stub.Settle(pb.SettleRequest(settlements=[ok, level])))
    assert_names(error, "settlements[1].fail.delay_level", "unset")
    error = await refused(stub.Settle(pb.SettleRequest(settlements=[ok, ok_ack(r[1]), too_long])))
    assert_names(error, "settlements[2].change_invisible.invisible_ms", SIMPLE_RANGE)

    # Nothing was applied: every receipt still settles, once.
    response = await stub.Settle(pb.SettleRequest(settlements=[ok_ack(x) for x in r]))
    assert [res.ok for res in response.results] == [True, True, True]


def ok_ack(receipt: str) -> pb.Settlement:
    return pb.Settlement(receipt=receipt, ack=pb.Ack())


async def test_settle_names_the_delay_range(stub: gateway_pb2_grpc.GatewayStub) -> None:
    t = topic()
    r = await received(stub, t, "pulsar", 2)
    for bad, field, allowed in [
        (pb.Fail(delay_ms=0), "fail.delay_ms", PULSAR_DELAY),
        (pb.Fail(delay_level=19), "fail.delay_level", "1..18"),
    ]:
        request = pb.SettleRequest(settlements=[ok_ack(r[0]), pb.Settlement(receipt=r[1],
                                                                         fail=bad)])
        assert_names(await refused(stub.Settle(request)), f"settlements[1].{field}", allowed)


# ------------------------------------------------------------------- Consume SettleBatch


async def test_settle_batch_results_name_the_refused_settlement(
    stub: gateway_pb2_grpc.GatewayStub,
) -> None:
    """On a stream each refused settlement gets its own result; its error names its path in
    the batch (the places of settlements the edge refused first included) and the range."""
    t = topic()
    await published(stub, t, 3)
    frames: asyncio.Queue[pb.ConsumeRequest | None] = asyncio.Queue()

    async def requests() -> AsyncIterator[pb.ConsumeRequest]:
        while (frame := await frames.get()) is not None:
            yield frame

    frames.put_nowait(pb.ConsumeRequest(subscribe=pb.Subscribe(
        topic=t, group="g", policy="pulsar", prefetch=3)))
    call = stub.Consume(requests(), timeout=60)
    try:
        assert (await call.read()).WhichOneof("kind") == "subscribed"
        r: list[str] = []
        while len(r) < 3:
            r += [d.receipt for d in (await call.read()).deliveries.deliveries]
        batch = [
            pb.Settlement(receipt="", ack=pb.Ack()),  # refused by the edge
            ok_ack(r[0]),
            pb.Settlement(receipt=r[1], fail=pb.Fail(delay_ms=5)),
            pb.Settlement(receipt=r[2], change_invisible=pb.ChangeInvisible(invisible_ms=999)),
        ]
        frames.put_nowait(pb.ConsumeRequest(settle=pb.SettleBatch(settlements=batch)))
        answer = await call.read()
        results: Sequence[pb.SettleResult] = answer.results.results
        assert [x.ok for x in results] == [False, True, False, False]
        assert [x.error_code for x in results] == ["INVALID_ARGUMENT", "", "INVALID_ARGUMENT",
                                                   "INVALID_ARGUMENT"]
        assert results[0].error.startswith("settlements[0].receipt=")
        assert results[2].error.startswith("settlements[2].fail.delay_ms=5 "), results[2].error
        assert PULSAR_DELAY in results[2].error
        assert results[3].error.startswith(
            "settlements[3].change_invisible.invisible_ms=999 "), results[3].error
        assert "1000..43200000" in results[3].error
        # The refused ones were not applied: they settle now.
        frames.put_nowait(pb.ConsumeRequest(settle=pb.SettleBatch(acks=[r[1], r[2]])))
        assert (await call.read()).results.acked == 2
    finally:
        frames.put_nowait(None)
        call.cancel()
