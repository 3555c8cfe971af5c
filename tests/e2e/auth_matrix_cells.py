"""The cells of the authorization matrix (tests/e2e/test_auth_matrix.py): one call of one
listener made by one caller, and whether the listener allowed or denied it.

A cell is DENIED when the listener answers with its protocol's refusal (UNAUTHENTICATED /
PERMISSION_DENIED; RocketMQ UNAUTHORIZED / FORBIDDEN; Pulsar AuthenticationError /
AuthorizationError or a refused CONNECT; AMQP 403 ACCESS_REFUSED, `auth_matrix_amqp`) and, for
settlements, the delivery is still unsettled afterwards; any other answer counts as ALLOWED (the
call got past access control).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

import grpc
from auth_clients import bearer, consume_requests, rmq_receive, rmq_send, signed
from auth_matrix_amqp import AmqpCells
from auth_matrix_pulsar import PulsarCells
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from gateway.backend.base import OutMessage
from gateway.engine.api import SubscriptionSpec
from gateway.server.app import GatewayApp
from gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc

ALLOWED, DENIED = "allowed", "denied"
CELL_TIMEOUT_S = 10.0
Code = definition_pb2.Code
REFUSED_GRPC = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
REFUSED_RMQ = frozenset({Code.UNAUTHORIZED, Code.FORBIDDEN, Code.ILLEGAL_TOPIC,
                         Code.ILLEGAL_CONSUMER_GROUP})
"""Refusals; an illegal name is refused before any permission check."""


@dataclass(frozen=True)
class Caller:
    name: str
    token: str | None = None
    access_key: str | None = None
    secret: str = ""

    @property
    def grpc(self) -> list[tuple[str, str]]:
        return bearer(self.token)

    @property
    def rocketmq(self) -> list[tuple[str, str]]:
        return signed(self.access_key, self.secret)


@dataclass(frozen=True)
class Row:
    listener: str
    call: str
    topic: str = ""
    group: str = ""
    who: frozenset[str] = frozenset()
    """The principals that must be allowed; every other caller must be denied."""


class Matrix(AmqpCells, PulsarCells):
    """Runs cells against one gateway: `app` is the running gateway, `callers` who tries each
    row, `home` the subscription each principal opens a Consume stream on to send settle
    frames."""

    def __init__(self, app: GatewayApp, channel: grpc.aio.Channel, callers: tuple[Caller, ...],
                 home: dict[str, tuple[str, str]]) -> None:
        self.app = app
        self.callers = callers
        self.home = home
        self.gw = gateway_pb2_grpc.GatewayStub(channel)
        self.admin = admin_pb2_grpc.AdminStub(channel)
        self.rmq = service_pb2_grpc.MessagingServiceStub(channel)

    async def run(self, rows: list[Row]) -> tuple[int, list[str]]:
        """(cells run, problems) for every row × every caller."""
        problems: list[str] = []
        cells = 0
        for row in rows:
            call = getattr(self, f"{row.listener}_{row.call}")
            for caller in self.callers:
                cells += 1
                try:
                    outcome = await asyncio.wait_for(call(row, caller), CELL_TIMEOUT_S)
                except Exception as exc:  # a cell that breaks is a problem, not a crash
                    outcome = f"error {type(exc).__name__}: {exc}"
                want = ALLOWED if caller.name in row.who else DENIED
                if outcome != want:
                    problems.append(f"{row.listener}.{row.call} topic={row.topic!r} "
                                    f"group={row.group!r} caller={caller.name}: {outcome}, "
                                    f"expected {want}")
        return cells, problems

    # --- outcomes ----------------------------------------------------------------------

    @staticmethod
    async def grpc_outcome(call: Awaitable[Any]) -> str:
        try:
            await call
        except grpc.aio.AioRpcError as err:
            return DENIED if err.code() in REFUSED_GRPC else ALLOWED
        return ALLOWED

    @staticmethod
    def rmq_outcome(status: Any) -> str:
        return DENIED if status.code in REFUSED_RMQ else ALLOWED

    def inflight(self, receipt: str) -> bool:
        return any(u.receipt == receipt for g in self.app.engine.groups()
                   for u in self.app.engine.unsettled(g.topic, g.group))

    async def delivery(self, topic: str, group: str) -> str:
        """A fresh delivery of (topic, group), made through the engine; its receipt."""
        engine = self.app.engine
        await engine.publish(topic, [OutMessage(body=b"settle me")])
        spec = SubscriptionSpec(topic=topic, group=group, policy="rocketmq-simple")
        (delivery,) = await engine.receive(spec, 1, 600_000, 1000)
        return delivery.receipt

    async def settled(self, receipt: str, refused: bool) -> str:
        """DENIED when the caller was refused and the delivery is still unsettled."""
        still = self.inflight(receipt)
        if still:
            await self.app.engine.ack([receipt])
        if refused and still:
            return DENIED
        if not refused and not still:
            return ALLOWED
        return f"mixed: refused={refused} but unsettled={still}"

    # --- gateway.v1 Gateway --------------------------------------------------------------

    async def gateway_Publish(self, row: Row, caller: Caller) -> str:
        request = gateway_pb2.PublishRequest(topic=row.topic,
                                             messages=[gateway_pb2.Message(body=b"m")])
        return await self.grpc_outcome(self.gw.Publish(request, metadata=caller.grpc))

    async def gateway_PublishStream(self, row: Row, caller: Caller) -> str:
        """One request to the row's topic on a stream: stored, or the stream ends refused."""
        first = gateway_pb2.PublishStreamRequest(request_id=1, publish=gateway_pb2.PublishRequest(
            topic=row.topic, messages=[gateway_pb2.Message(body=b"m")]))
        call = self.gw.PublishStream(iter([first]), metadata=caller.grpc)
        try:
            answers = [answer async for answer in call]
        except grpc.aio.AioRpcError as err:
            return DENIED if err.code() in REFUSED_GRPC else ALLOWED
        (answer,) = answers
        if answer.error_code in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
            return DENIED
        return ALLOWED if answer.message_ids else f"answer {answer}"

    async def gateway_Receive(self, row: Row, caller: Caller) -> str:
        request = gateway_pb2.ReceiveRequest(topic=row.topic, group=row.group,
                                             policy="rocketmq-simple", max_messages=1,
                                             invisible_ms=60_000, wait_ms=0)
        return await self.grpc_outcome(self.gw.Receive(request, metadata=caller.grpc))

    async def gateway_Consume(self, row: Row, caller: Caller) -> str:
        later: asyncio.Queue[gateway_pb2.ConsumeRequest | None] = asyncio.Queue()
        call = self.gw.Consume(consume_requests(row.topic, row.group, later),
                               metadata=caller.grpc)
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as err:
            return DENIED if err.code() in REFUSED_GRPC else ALLOWED
        finally:
            await later.put(None)
            call.cancel()
        return ALLOWED if first.WhichOneof("kind") == "subscribed" else f"answer {first}"

    async def gateway_Settle(self, row: Row, caller: Caller) -> str:
        receipt = await self.delivery(row.topic, row.group)
        request = gateway_pb2.SettleRequest(settlements=[
            gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack())])
        try:
            reply = await self.gw.Settle(request, metadata=caller.grpc)
        except grpc.aio.AioRpcError as err:
            refused = err.code() in REFUSED_GRPC
        else:
            refused = reply.results[0].error_code in ("PERMISSION_DENIED", "UNAUTHENTICATED")
        return await self.settled(receipt, refused)

    async def _stream_settle(self, row: Row, caller: Caller, compact: bool) -> str:
        receipt = await self.delivery(row.topic, row.group)
        home = (row.topic, row.group) if caller.name in row.who else self.home[caller.name]
        later: asyncio.Queue[gateway_pb2.ConsumeRequest | None] = asyncio.Queue()
        call = self.gw.Consume(consume_requests(*home, later), metadata=caller.grpc)
        batch = (gateway_pb2.SettleBatch(acks=[receipt]) if compact else gateway_pb2.SettleBatch(
            settlements=[gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack())]))
        refused = True
        try:
            await call.read()  # subscribed (or the refusal)
            await later.put(gateway_pb2.ConsumeRequest(settle=batch))
            while (answer := await call.read()).WhichOneof("kind") != "results":
                pass
            if compact:
                refused = answer.results.acked == 0 and answer.results.results[0].error_code \
                    == "PERMISSION_DENIED"
            else:
                refused = answer.results.results[0].error_code == "PERMISSION_DENIED"
        except grpc.aio.AioRpcError as err:
            refused = err.code() in REFUSED_GRPC
        finally:
            await later.put(None)
            call.cancel()
        return await self.settled(receipt, refused)

    async def gateway_ConsumeSettle(self, row: Row, caller: Caller) -> str:
        return await self._stream_settle(row, caller, compact=False)

    async def gateway_ConsumeAck(self, row: Row, caller: Caller) -> str:
        return await self._stream_settle(row, caller, compact=True)

    # --- gateway.v1 Admin ----------------------------------------------------------------

    async def admin_DescribeGroup(self, row: Row, caller: Caller) -> str:
        request = admin_pb2.DescribeGroupRequest(topic="orders", group="app")
        return await self.grpc_outcome(self.admin.DescribeGroup(request, metadata=caller.grpc))

    async def admin_ListDeadLetters(self, row: Row, caller: Caller) -> str:
        request = admin_pb2.ListDeadLettersRequest(topic="orders", group="app", limit=10)
        return await self.grpc_outcome(self.admin.ListDeadLetters(request, metadata=caller.grpc))

    async def admin_ResendDeadLetters(self, row: Row, caller: Caller) -> str:
        request = admin_pb2.ResendDeadLettersRequest(topic="orders", group="app",
                                                     message_ids=["none"])
        return await self.grpc_outcome(self.admin.ResendDeadLetters(request,
                                                                    metadata=caller.grpc))

    async def admin_Purge(self, row: Row, caller: Caller) -> str:
        request = admin_pb2.PurgeRequest(topic="scratch", group="scratch")
        return await self.grpc_outcome(self.admin.Purge(request, metadata=caller.grpc))

    async def admin_ListTopics(self, row: Row, caller: Caller) -> str:
        request = admin_pb2.ListTopicsRequest()
        return await self.grpc_outcome(self.admin.ListTopics(request, metadata=caller.grpc))

    async def admin_RenameDestinations(self, row: Row, caller: Caller) -> str:
        request = admin_pb2.RenameDestinationsRequest(
            topic="scratch", group="scratch", from_naming="pulsar-2.7", to_naming="pulsar-2.9")
        return await self.grpc_outcome(self.admin.RenameDestinations(request,
                                                                     metadata=caller.grpc))

    async def admin_ExportMessages(self, row: Row, caller: Caller) -> str:
        request = admin_pb2.ExportMessagesRequest(topic="orders", group="app",
                                                  part=admin_pb2.MESSAGE_PART_DEAD_LETTER)
        return await self.grpc_outcome(self.admin.ExportMessages(request, metadata=caller.grpc))

    async def admin_RemoveExported(self, row: Row, caller: Caller) -> str:
        request = admin_pb2.RemoveExportedRequest(
            topic="scratch", group="scratch", part=admin_pb2.MESSAGE_PART_READY,
            positions=[10**9])
        return await self.grpc_outcome(self.admin.RemoveExported(request, metadata=caller.grpc))

    async def admin_ImportMessages(self, row: Row, caller: Caller) -> str:
        request = admin_pb2.ImportMessagesRequest(
            topic="scratch", ledger="matrix", messages=[admin_pb2.MovedMessage(
                body=b"x", part=admin_pb2.MESSAGE_PART_READY, source_key="k")])
        return await self.grpc_outcome(self.admin.ImportMessages(request, metadata=caller.grpc))

    # --- RocketMQ 5 MessagingService -----------------------------------------------------

    async def _rmq_unary(self, method: str, request: Any, caller: Caller) -> str:
        try:
            reply = await getattr(self.rmq, method)(request, metadata=caller.rocketmq)
        except grpc.aio.AioRpcError as err:
            return DENIED if err.code() in REFUSED_GRPC else ALLOWED
        return self.rmq_outcome(reply.status)

    async def rocketmq_SendMessage(self, row: Row, caller: Caller) -> str:
        return await self._rmq_unary("SendMessage", rmq_send(row.topic), caller)

    async def rocketmq_SendHalf(self, row: Row, caller: Caller) -> str:
        request = rmq_send(row.topic)
        request.messages[0].system_properties.message_type = (
            definition_pb2.MessageType.TRANSACTION)
        return await self._rmq_unary("SendMessage", request, caller)

    async def rocketmq_EndTransaction(self, row: Row, caller: Caller) -> str:
        """Ending a transaction of the topic (this one does not exist: INVALID_TRANSACTION_ID
        for a caller who may publish to it)."""
        request = service_pb2.EndTransactionRequest(
            message_id="M1", transaction_id="T1",
            resolution=definition_pb2.TransactionResolution.ROLLBACK)
        request.topic.name = row.topic
        return await self._rmq_unary("EndTransaction", request, caller)

    async def rocketmq_ReceiveMessage(self, row: Row, caller: Caller) -> str:
        try:
            async for reply in self.rmq.ReceiveMessage(rmq_receive(row.topic, row.group),
                                                       metadata=caller.rocketmq):
                if reply.WhichOneof("content") == "status":
                    return self.rmq_outcome(reply.status)
        except grpc.aio.AioRpcError as err:
            return DENIED if err.code() in REFUSED_GRPC else ALLOWED
        return "no status"

    async def _rmq_settle(self, row: Row, caller: Caller, method: str) -> str:
        receipt = await self.delivery(row.topic, row.group)
        handle = f"s.{receipt}"
        if method == "AckMessage":
            request: Any = service_pb2.AckMessageRequest()
            request.entries.add(message_id="M", receipt_handle=handle)
            request.topic.name, request.group.name = row.topic, row.group
        elif method == "ChangeInvisibleDuration":
            request = service_pb2.ChangeInvisibleDurationRequest(receipt_handle=handle,
                                                                 message_id="M")
            request.invisible_duration.seconds = 30
            request.topic.name, request.group.name = row.topic, row.group
        else:
            request = service_pb2.ForwardMessageToDeadLetterQueueRequest(receipt_handle=handle,
                                                                         message_id="M")
            request.topic.name, request.group.name = row.topic, row.group
        outcome = await self._rmq_unary(method, request, caller)
        return await self.settled(receipt, outcome == DENIED)

    async def rocketmq_AckMessage(self, row: Row, caller: Caller) -> str:
        return await self._rmq_settle(row, caller, "AckMessage")

    async def rocketmq_ChangeInvisibleDuration(self, row: Row, caller: Caller) -> str:
        return await self._rmq_settle(row, caller, "ChangeInvisibleDuration")

    async def rocketmq_ForwardMessageToDeadLetterQueue(self, row: Row, caller: Caller) -> str:
        return await self._rmq_settle(row, caller, "ForwardMessageToDeadLetterQueue")

    async def rocketmq_QueryRoute(self, row: Row, caller: Caller) -> str:
        request = service_pb2.QueryRouteRequest()
        request.topic.name = "orders"
        return await self._rmq_unary("QueryRoute", request, caller)

    async def rocketmq_QueryAssignment(self, row: Row, caller: Caller) -> str:
        request = service_pb2.QueryAssignmentRequest()
        request.topic.name = "orders"
        request.group.name = "app"
        return await self._rmq_unary("QueryAssignment", request, caller)

    async def rocketmq_Heartbeat(self, row: Row, caller: Caller) -> str:
        return await self._rmq_unary("Heartbeat", service_pb2.HeartbeatRequest(), caller)

    async def rocketmq_NotifyClientTermination(self, row: Row, caller: Caller) -> str:
        return await self._rmq_unary("NotifyClientTermination",
                                     service_pb2.NotifyClientTerminationRequest(), caller)

    async def rocketmq_Telemetry(self, row: Row, caller: Caller) -> str:
        async def commands() -> AsyncIterator[Any]:
            command = service_pb2.TelemetryCommand()
            command.settings.client_type = definition_pb2.ClientType.PRODUCER
            yield command

        try:
            async for reply in self.rmq.Telemetry(commands(), metadata=caller.rocketmq):
                return self.rmq_outcome(reply.status)
        except grpc.aio.AioRpcError as err:
            return DENIED if err.code() in REFUSED_GRPC else ALLOWED
        return ALLOWED

    async def rocketmq_unsupported(self, row: Row, caller: Caller) -> str:
        """Calls the front end does not offer: authentication first, then UNIMPLEMENTED."""
        method = row.topic
        request = getattr(service_pb2, f"{method}Request")()
        try:
            answer = getattr(self.rmq, method)(request, metadata=caller.rocketmq)
            if method == "PullMessage":
                async for _ in answer:
                    pass
            else:
                await answer
        except grpc.aio.AioRpcError as err:
            return DENIED if err.code() in REFUSED_GRPC else ALLOWED
        return ALLOWED
