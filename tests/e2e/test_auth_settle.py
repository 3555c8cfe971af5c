"""Settling a delivery needs permission to consume its topic with its group (issue 16, defect 5).

payroll receives a message; billing, which knows the receipt, tries to settle it on every path:
gateway.v1 Settle, settle frames on a Consume stream (settlements and compact acks), RocketMQ
Ack / ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue. Each is refused with
PERMISSION_DENIED (FORBIDDEN in RocketMQ) and leaves the delivery to payroll, who settles it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from auth_clients import bearer, consume_requests, rmq_receive, rmq_receive_handles, signed
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import gateway_pb2, gateway_pb2_grpc

TOKENS = """
[[principal]]
name = "billing"
token = "billing-secret"
publish = ["orders"]
consume = ["orders"]
groups = ["billing"]
rocketmq_access_key = "billing-ak"
rocketmq_secret_key = "billing-sk"

[[principal]]
name = "payroll"
token = "payroll-secret"
publish = ["payroll"]
consume = ["payroll"]
groups = ["payroll"]
rocketmq_access_key = "payroll-ak"
rocketmq_secret_key = "payroll-sk"
"""
BILLING = bearer("billing-secret")
PAYROLL = bearer("payroll-secret")
Code = definition_pb2.Code


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens)) as running:
        yield running


async def payroll_receipts(gw: gateway_pb2_grpc.GatewayStub, count: int) -> list[str]:
    publish = gateway_pb2.PublishRequest(
        topic="payroll", messages=[gateway_pb2.Message(body=b"salary")] * count)
    await gw.Publish(publish, metadata=PAYROLL)
    receive = gateway_pb2.ReceiveRequest(topic="payroll", group="payroll",
                                         policy="rocketmq-simple", max_messages=count,
                                         invisible_ms=60_000, wait_ms=1000)
    reply = await gw.Receive(receive, metadata=PAYROLL)
    assert len(reply.deliveries) == count
    return [d.receipt for d in reply.deliveries]


def ack(receipt: str) -> gateway_pb2.Settlement:
    return gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack())


async def owner_settles(gw: gateway_pb2_grpc.GatewayStub, receipts: list[str]) -> None:
    reply = await gw.Settle(gateway_pb2.SettleRequest(settlements=[ack(r) for r in receipts]),
                            metadata=PAYROLL)
    assert [r.ok for r in reply.results] == [True] * len(receipts)


async def test_settle_of_another_principals_receipt_is_refused(app: GatewayApp) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        gw = gateway_pb2_grpc.GatewayStub(channel)
        (receipt,) = await payroll_receipts(gw, 1)
        request = gateway_pb2.SettleRequest(settlements=[ack(receipt)])
        try:
            reply = await gw.Settle(request, metadata=BILLING)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        else:
            (result,) = reply.results
            assert not result.ok
            assert result.error_code == "PERMISSION_DENIED"
        await owner_settles(gw, [receipt])


async def test_a_refused_settle_does_not_name_the_owners_topic_or_group(
    app: GatewayApp,
) -> None:
    """The refusal told billing which topic and group payroll's receipt was of."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        gw = gateway_pb2_grpc.GatewayStub(channel)
        (receipt,) = await payroll_receipts(gw, 1)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await gw.Settle(gateway_pb2.SettleRequest(settlements=[ack(receipt)]),
                            metadata=BILLING)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        said = refused.value.details() or ""
        assert "billing may not settle this delivery" in said and "payroll" not in said
        later: asyncio.Queue[gateway_pb2.ConsumeRequest | None] = asyncio.Queue()
        call = gw.Consume(consume_requests("orders", "billing", later), metadata=BILLING)
        assert (await call.read()).WhichOneof("kind") == "subscribed"
        await later.put(gateway_pb2.ConsumeRequest(
            settle=gateway_pb2.SettleBatch(settlements=[ack(receipt)])))
        (result,) = (await call.read()).results.results
        assert result.error_code == "PERMISSION_DENIED" and "payroll" not in result.error
        await later.put(None)
        call.cancel()
        await owner_settles(gw, [receipt])


async def test_settle_frames_on_a_stream_are_checked(app: GatewayApp) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        gw = gateway_pb2_grpc.GatewayStub(channel)
        first, second = await payroll_receipts(gw, 2)
        later: asyncio.Queue[gateway_pb2.ConsumeRequest | None] = asyncio.Queue()
        call = gw.Consume(consume_requests("orders", "billing", later), metadata=BILLING)
        assert (await call.read()).WhichOneof("kind") == "subscribed"
        await later.put(gateway_pb2.ConsumeRequest(
            settle=gateway_pb2.SettleBatch(settlements=[ack(first)], acks=[second])))
        answer = await call.read()
        assert answer.WhichOneof("kind") == "results"
        assert answer.results.acked == 0
        codes = [(r.receipt, r.ok, r.error_code) for r in answer.results.results]
        assert codes == [(first, False, "PERMISSION_DENIED"), (second, False, "PERMISSION_DENIED")]
        await later.put(None)
        call.cancel()
        await owner_settles(gw, [first, second])


async def test_rocketmq_settles_are_checked(app: GatewayApp) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        gw = gateway_pb2_grpc.GatewayStub(channel)
        rmq = service_pb2_grpc.MessagingServiceStub(channel)
        await gw.Publish(gateway_pb2.PublishRequest(
            topic="payroll", messages=[gateway_pb2.Message(body=b"salary")]), metadata=PAYROLL)
        code, (handle,) = await rmq_receive_handles(rmq, signed("payroll-ak", "payroll-sk"),
                                                    "payroll", "payroll")
        assert code == Code.OK
        billing = signed("billing-ak", "billing-sk")

        acked = service_pb2.AckMessageRequest()
        acked.entries.add(message_id="M", receipt_handle=handle)
        acked.topic.name, acked.group.name = "payroll", "payroll"
        reply = await rmq.AckMessage(acked, metadata=billing)
        assert reply.status.code == Code.FORBIDDEN
        assert reply.entries[0].status.code == Code.FORBIDDEN

        change = service_pb2.ChangeInvisibleDurationRequest(receipt_handle=handle, message_id="M")
        change.topic.name, change.group.name = "payroll", "payroll"
        change.invisible_duration.seconds = 30
        reply = await rmq.ChangeInvisibleDuration(change, metadata=billing)
        assert reply.status.code == Code.FORBIDDEN

        forward = service_pb2.ForwardMessageToDeadLetterQueueRequest(receipt_handle=handle,
                                                                     message_id="M")
        forward.topic.name, forward.group.name = "payroll", "payroll"
        reply = await rmq.ForwardMessageToDeadLetterQueue(forward, metadata=billing)
        assert reply.status.code == Code.FORBIDDEN

        reply = await rmq.AckMessage(acked, metadata=signed("payroll-ak", "payroll-sk"))
        assert reply.status.code == Code.OK


async def test_another_principal_cannot_end_a_clients_renewals(app: GatewayApp) -> None:
    """NotifyClientTermination names a client id; one principal naming another's client id must
    not stop the renewal of that client's push deliveries (they would time out and retry)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        gw = gateway_pb2_grpc.GatewayStub(channel)
        rmq = service_pb2_grpc.MessagingServiceStub(channel)
        await gw.Publish(gateway_pb2.PublishRequest(
            topic="payroll", messages=[gateway_pb2.Message(body=b"salary")]), metadata=PAYROLL)
        payroll = signed("payroll-ak", "payroll-sk", client_id="payroll-host@1")
        push = rmq_receive("payroll", "payroll")
        push.auto_renew = True
        push.ClearField("invisible_duration")
        handles = [r.message.system_properties.receipt_handle
                   async for r in rmq.ReceiveMessage(push, metadata=payroll)
                   if r.WhichOneof("content") == "message"]
        (handle,) = handles
        table = app.front_ends["rocketmq"].service._renewer._table
        receipt = handle.partition(".")[2]
        assert receipt in table
        intruder = signed("billing-ak", "billing-sk", client_id="payroll-host@1")
        await rmq.NotifyClientTermination(service_pb2.NotifyClientTerminationRequest(),
                                          metadata=intruder)
        assert receipt in table
        await rmq.NotifyClientTermination(service_pb2.NotifyClientTerminationRequest(),
                                          metadata=payroll)
        assert receipt not in table
